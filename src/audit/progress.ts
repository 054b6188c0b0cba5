/**
 * Live progress on stderr: one line rewritten in place when stderr is a terminal (at most 10 redraws a second; each
 * scenario's last state stays on screen), plain lines otherwise (scenario start and end, and every `plainEvery`
 * requests) so that logs stay readable.
 */
export interface ProgressSink {
  readonly isTTY?: boolean;
  write(text: string): unknown;
}

const REDRAW_MS = 100;

export class Progress {
  private scenario = '';
  private done = 0;
  private planned = 0;
  private findings = 0;
  private lastDrawMs = 0;
  private lineOpen = false;

  constructor(
    private readonly sink: ProgressSink,
    private readonly plainEvery = 25,
  ) {}

  private get tty(): boolean {
    return this.sink.isTTY === true;
  }

  start(scenario: string, planned: number): void {
    this.close();
    this.scenario = scenario;
    this.done = 0;
    this.planned = planned;
    this.findings = 0;
    if (this.tty) this.redraw();
    else this.sink.write(`audit ${scenario}: started (about ${planned} requests)\n`);
  }

  request(findingsSoFar: number): void {
    this.done++;
    this.findings = findingsSoFar;
    if (this.tty) {
      if (Date.now() - this.lastDrawMs >= REDRAW_MS) this.redraw();
    } else if (this.done % this.plainEvery === 0) {
      this.sink.write(`audit ${this.scenario}: ${this.done} requests\n`);
    }
  }

  end(verdict: string, findings: number): void {
    this.findings = findings;
    const text = `audit ${this.scenario}: ${verdict.replace('_', ' ')} (${this.done} requests, ${findings} findings)`;
    if (this.tty) {
      this.sink.write(`\r\x1b[2K${text}\n`);
      this.lineOpen = false;
    } else this.sink.write(`${text}\n`);
  }

  /** ends an in-place line before anything else is printed */
  close(): void {
    if (this.tty && this.lineOpen) this.sink.write('\n');
    this.lineOpen = false;
  }

  private redraw(): void {
    this.lastDrawMs = Date.now();
    const findings = this.findings === 0 ? '' : `, ${this.findings} findings`;
    this.sink.write(`\r\x1b[2Kaudit ${this.scenario}: ${this.done}/~${this.planned} requests${findings}`);
    this.lineOpen = true;
  }
}
