// Every test process enters its project first, as every Troupe process does (in a checkout: the
// examples project, examples/), so tests see its teams by name. Tests of other projects enter
// theirs explicitly, or run the CLI in them. Loaded by enter-project.mjs.
import { enterProjectFromEnvironment } from '../../processes/project';

enterProjectFromEnvironment({ required: false });
