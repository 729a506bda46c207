// Types for stack/install.js (plain JS so it runs before node_modules exists).
export declare function packagesStaleReason(repoRoot: string): string | undefined;
export declare function ensurePackages(repoRoot: string, log?: (line: string) => void): boolean;
export declare function dashboardStaleReason(repoRoot: string): string | undefined;
export declare function ensureDashboardBuild(repoRoot: string, log?: (line: string) => void): boolean;
export declare function withLockFile<T>(lockPath: string, onWait: (pid: number) => void, fn: () => T): T;
export declare function pidAlive(pid: number): boolean;
export declare function isSourceCheckout(root: string): boolean;
export declare function ensureOnnxRuntime(root: string, log?: (line: string) => void): string | undefined;
