import { open, type FileHandle } from "node:fs/promises";

/**
 * The guest's serial console, written by QEMU to a file and read here as it grows.
 *
 * A file, not a pipe: QEMU's serial port drops a byte when its output would block a few
 * times in a row, and a pipe to a busy test process does block. A lost byte in the ready
 * marker made a healthy boot look hung (CI, stop 23). A file never blocks the guest.
 */
export class ConsoleTail {
  private offset = 0;
  private pending = "";
  private timer?: NodeJS.Timeout;
  private reading = false;
  private readonly decoder = new TextDecoder("utf-8");
  private readonly buffer = Buffer.alloc(64 * 1024);
  private file?: FileHandle;

  constructor(
    private readonly path: string,
    private readonly onLine: (line: string) => void,
  ) {}

  start(intervalMs = 200): void {
    this.timer = setInterval(() => void this.poll(), intervalMs);
  }

  /** Reads what is left (the last lines before QEMU exited) and stops polling. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    while (this.reading) await new Promise((resolve) => setTimeout(resolve, 20));
    await this.poll();
    await this.file?.close();
    this.file = undefined;
    if (this.pending) this.emit(this.pending);
    this.pending = "";
  }

  private async poll(): Promise<void> {
    if (this.reading) return;
    this.reading = true;
    try {
      this.file ??= await open(this.path, "r").catch(() => undefined);
      if (!this.file) return; // QEMU has not created it yet
      for (;;) {
        const { bytesRead } = await this.file.read(this.buffer, 0, this.buffer.length, this.offset);
        if (bytesRead === 0) break;
        this.offset += bytesRead;
        this.take(this.decoder.decode(this.buffer.subarray(0, bytesRead), { stream: true }));
      }
    } finally {
      this.reading = false;
    }
  }

  private take(text: string): void {
    const lines = (this.pending + text).split(/\r?\n/);
    this.pending = lines.pop() ?? "";
    for (const line of lines) this.emit(line);
  }

  private emit(raw: string): void {
    const line = withoutTerminalControls(raw);
    if (line) this.onLine(line);
  }
}

/** A console line as a person reads it: colours, cursor moves, terminal resets and stray carriage returns removed. */
export function withoutTerminalControls(raw: string): string {
  return (
    raw
      // eslint-disable-next-line no-control-regex
      .replace(/\x1b\][^\x07\x1b]*(\x07|\x1b\\)/g, "") // OSC: palette resets, titles
      // eslint-disable-next-line no-control-regex
      .replace(/\x1b\[[0-9;?=!>]*[ -/]*[@-~]/g, "") // CSI, DECSTR (ESC [ ! p) included
      // eslint-disable-next-line no-control-regex
      .replace(/\x1b[()][0-9A-Za-z]|\x1b[=>c78]/g, "")
      .replace(/\r/g, "")
      .trimEnd()
  );
}
