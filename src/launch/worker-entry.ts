/** The program a supervisor forks for each worker (see worker-main.ts). */
import { runSupervisedWorker } from './worker-main.js';

runSupervisedWorker();
