#!/usr/bin/env node
'use strict';
// `npx troupe ...` — plain JavaScript with no dependencies, so it works in a fresh
// clone: installs packages first if node_modules is missing or stale (and generates the
// engine protocol's types and builds the dashboard's page if those are), then loads the TypeScript CLI through tsx.
const path = require('node:path');

const repoRoot = path.resolve(__dirname, '..');
const install = require('../infra/install.js');
install.ensurePackages(repoRoot);
install.ensureProtocolTypes(repoRoot);
install.ensureDashboardBuild(repoRoot);
// TypeScript through require() (CommonJS). Dynamic import() of a .ts file is not covered here:
// load TypeScript modules with static imports or require().
require('tsx/cjs');
require('./main.ts').run(process.argv.slice(2));
