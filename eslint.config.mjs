// ESLint (`npm run lint`): rules that catch real mistakes, not style (Prettier owns style).
//   troupe/layers            imports only from the file's own layer or lower ones (tools/eslint/layers.js)
//   troupe/no-cycle          no cycle of load-time imports (tools/eslint/cycles.js)
//   no-floating-promises     every promise is awaited, returned, or marked `void` with a reason
//   consistent-type-imports  a type comes in through `import type`, so no module loads for a type alone
import tseslint from 'typescript-eslint';
import cycles from './tools/eslint/cycles.js';
import layers from './tools/eslint/layers.js';

const troupe = { rules: { layers: layers.rule, 'no-cycle': cycles.rule } };

export default [
  {
    ignores: ['**/node_modules/**', 'dashboard/dist/**', 'dist/**', 'engines/protocol/gen/**', 'engines/pytorch/.gen*/**', '**/.troupe/**'],
  },
  {
    files: ['**/*.{ts,js,mjs,cjs}'],
    languageOptions: { parser: tseslint.parser, sourceType: 'module' },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    plugins: { troupe },
    rules: { 'troupe/layers': 'error' },
  },
  {
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
  },
  {
    // Type-aware rules: TypeScript files, each checked with the program of its tsconfig.json.
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { '@typescript-eslint': tseslint.plugin },
    rules: {
      'troupe/no-cycle': 'error',
      // node:test's test()/describe()/it() return promises the runner itself awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite', 'before', 'after', 'beforeEach', 'afterEach'] },
          ],
        },
      ],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports', disallowTypeAnnotations: false }],
    },
  },
];
