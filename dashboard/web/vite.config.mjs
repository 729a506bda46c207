// Vite's build of the dashboard page: dashboard/web → dashboard/dist, which dashboard/server.ts serves.
// Run by the project's set-up (stack/install.js ensureDashboardBuild), not by hand.
export default {
  build: {
    outDir: '../dist',
    emptyOutDir: true,
    // Vega and Vega-Lite are most of the bundle (~1.1 MB); one file loads once and is cached.
    chunkSizeWarningLimit: 4096,
  },
};
