import { defineConfig } from 'troupe';

// Teams written for benches, not tuned on: `TROUPE_PROJECT=bench/teams node --import tsx bench/staleness.ts --team triad`.
export default defineConfig({
  teams: {
    triad: './triad.ts',
  },
});
