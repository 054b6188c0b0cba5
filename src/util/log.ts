/** The part of a pino logger the engine's shells use, so they do not depend on the HTTP framework or on pino. */
export interface LogSink {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}
