/**
 * A bounded server-sent-events reader: feed it decoded text as it arrives, get back each event's `data` payload.
 * Servers differ in line endings (\n, \r\n) and in spacing after "data:"; comments (": ...") and other fields are
 * ignored. A line longer than `lineCharsMax` is an error, never an unbounded buffer.
 */
export class SseReader {
  private pending = '';
  private data: string[] = [];

  constructor(private readonly lineCharsMax: number) {}

  /** Returns the data of every event completed by `chunk` (a blank line ends an event). */
  push(chunk: string): string[] {
    this.pending += chunk;
    const events: string[] = [];
    for (;;) {
      const end = this.pending.indexOf('\n');
      if (end < 0) break;
      const line = this.pending.slice(0, end).replace(/\r$/, '');
      this.pending = this.pending.slice(end + 1);
      this.line(line, events);
    }
    if (this.pending.length > this.lineCharsMax) {
      throw new Error(`an event-stream line is longer than ${this.lineCharsMax} characters`);
    }
    return events;
  }

  /** The last event when the stream ends without its blank line. */
  finish(): string[] {
    const events: string[] = [];
    if (this.pending !== '') this.line(this.pending.replace(/\r$/, ''), events);
    this.pending = '';
    if (this.data.length > 0) events.push(this.data.join('\n'));
    this.data = [];
    return events;
  }

  private line(line: string, events: string[]): void {
    if (line === '') {
      if (this.data.length > 0) events.push(this.data.join('\n'));
      this.data = [];
      return;
    }
    if (line.startsWith('data:')) this.data.push(line.slice(5).replace(/^ /, ''));
  }
}
