#!/usr/bin/env node
/** The `kvfence` command. */
import { Command, CommanderError } from 'commander';
import { addAuditCommand } from './audit-command.js';
import { addDecodeCommand } from './decode-command.js';
import { reportFailure } from './errors.js';
import { addGatewayCommand } from './gateway-command.js';
import { addGenerateCommand } from './generate-command.js';
import { addKeysCommand } from './keys-command.js';
import { addModelCommands } from './model-commands.js';
import { addPrefillCommand } from './prefill-command.js';
import { addServeCommand } from './serve-command.js';

const program = new Command('kvfence')
  .description('multi-tenant LLM inference with a KV cache that cannot leak between tenants')
  .exitOverride()
  .showHelpAfterError(false);
addModelCommands(program);
addGenerateCommand(program);
addServeCommand(program);
addKeysCommand(program);
addGatewayCommand(program);
addPrefillCommand(program);
addDecodeCommand(program);
addAuditCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) process.exitCode = error.exitCode;
  else process.exitCode = reportFailure(error);
}
