#!/usr/bin/env node
/** The `kvfence` command. */
import { Command, CommanderError } from 'commander';
import { reportFailure } from '../launch/report-failure.js';
import { addAuditCommand } from './audit-command.js';
import { addGatewayCommand } from './gateway-command.js';
import { addGenerateCommand } from './generate-command.js';
import { addKeysCommand } from './keys-command.js';
import { addModelCommands } from './model-commands.js';
import { addServeCommand } from './serve-command.js';
import { addWorkerCommand } from './worker-command.js';

const program = new Command('kvfence')
  .description('multi-tenant LLM inference with a KV cache that cannot leak between tenants')
  .exitOverride()
  .showHelpAfterError(false);
addModelCommands(program);
addGenerateCommand(program);
addServeCommand(program);
addKeysCommand(program);
addGatewayCommand(program);
addWorkerCommand(program, 'prefill');
addWorkerCommand(program, 'decode');
addAuditCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) process.exitCode = error.exitCode;
  // exits at once: a server that failed to start may hold threads or sockets open, and a supervisor must see the exit
  else process.exit(reportFailure(error));
}
