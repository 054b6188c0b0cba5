import { errorMessage } from '../util/errors.js';

/**
 * SIGHUP, from the start of the process: re-reads the key file while serving (a bad file is reported and the running
 * table stays); while starting, draining or in a worker (which has no key file) it is ignored, and said so. Without a
 * handler node ends the process on SIGHUP, undrained.
 */
export class Hangup {
  private open: { reloadKeys(): string } | undefined;
  private why = 'the server is starting';

  constructor(private readonly announce: (line: string) => void) {
    process.on('SIGHUP', () => this.onHangup());
  }

  /** from now on a SIGHUP reloads `open`'s key file */
  serving(open: { reloadKeys(): string }): void {
    this.open = open;
  }

  /** from now on a SIGHUP is ignored, for `why` */
  ignore(why: string): void {
    this.open = undefined;
    this.why = why;
  }

  private onHangup(): void {
    if (this.open === undefined) {
      this.announce(`kvfence: SIGHUP ignored: ${this.why}`);
      return;
    }
    try {
      this.announce(`kvfence: ${this.open.reloadKeys()}`);
    } catch (error) {
      this.announce(`kvfence: key file NOT reloaded: ${errorMessage(error)}`);
    }
  }
}
