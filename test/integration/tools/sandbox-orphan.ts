/**
 * A worker that dies mid-call (sandbox.test.ts kills this process with SIGKILL): runs a
 * snippet that would sleep for long, and says so once it runs.
 */
import { runSandbox } from '../../../activities/sandbox';
import { sandboxSpecOf, sandboxTool } from '../../../agents/sandbox-tool';

const spec = sandboxSpecOf(sandboxTool({ limits: { wallMs: 60_000 } }));
if (spec) {
  void runSandbox(spec, { language: 'shell', code: `sleep ${process.argv[2]}` }, { signal: new AbortController().signal });
  setTimeout(() => console.log('running'), 500);
}
