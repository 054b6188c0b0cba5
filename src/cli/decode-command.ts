/** `kvfence decode`: a decode worker of a disaggregated deployment (flags shared with `kvfence prefill`). */
import type { Command } from 'commander';
import { addWorkerCommand } from './prefill-command.js';

export function addDecodeCommand(program: Command): void {
  addWorkerCommand(program, 'decode');
}
