/**
 * A worker's side of its control connections: each authenticated connection begins with this worker's hello, then
 * carries control messages to the role's handlers; when it closes, the role cancels what that connection started.
 */
import type { LogSink } from '../util/log.js';
import type { FrameChannel } from '../wire/frame-channel.js';
import type { TransferListener, TransferTransport } from '../wire/transport.js';
import { ControlConnection } from './control-channel.js';
import type { ControlMessage, WorkerHello } from './control-protocol.js';

export interface ConnectionHandlers {
  message(message: ControlMessage): void;
  closed(): void;
}

export interface ControlServerOptions {
  transport: TransferTransport;
  listen: string;
  hello: WorkerHello;
  idleTimeoutMs: number;
  log: LogSink;
  /** the role's handlers for one new connection */
  handlersFor(conn: ControlConnection): ConnectionHandlers;
  /** the worker drains: a connection that completes its handshake now hears `draining` right after the hello */
  isDraining(): boolean;
}

export function serveControl(options: ControlServerOptions): Promise<TransferListener> {
  return options.transport.listen(options.listen, (channel: FrameChannel) => {
    let handlers: ConnectionHandlers | undefined;
    const conn = new ControlConnection(
      channel,
      {
        message: (m) => handlers?.message(m),
        close: (why) => {
          options.log.info({ why }, 'control connection closed; its requests are cancelled');
          handlers?.closed();
        },
      },
      options.idleTimeoutMs,
    );
    handlers = options.handlersFor(conn);
    conn.send({ type: 'hello', hello: options.hello });
    if (options.isDraining()) conn.send({ type: 'draining' });
  });
}
