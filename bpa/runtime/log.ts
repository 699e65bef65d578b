/** A small structured logger: one line per event, JSON when BPA_LOG_FORMAT=json. */

export type Level = "debug" | "info" | "warn" | "error";
const ORDER: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export function makeLogger(options: { level?: Level; json?: boolean; fields?: Record<string, unknown>; write?: (line: string) => void } = {}): Logger {
  const level = options.level ?? (process.env.BPA_LOG_LEVEL as Level | undefined) ?? "info";
  const json = options.json ?? process.env.BPA_LOG_FORMAT === "json";
  const write = options.write ?? ((line: string) => process.stderr.write(`${line}\n`));
  const base = options.fields ?? {};
  const emit = (l: Level, message: string, fields: Record<string, unknown> = {}) => {
    if (ORDER[l] < ORDER[level]) return;
    const all = { ...base, ...fields };
    if (json) {
      write(JSON.stringify({ time: new Date().toISOString(), level: l, msg: message, ...all }));
    } else {
      const extra = Object.entries(all)
        .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
        .join(" ");
      write(`${new Date().toISOString()} ${l.toUpperCase().padEnd(5)} ${message}${extra ? ` ${extra}` : ""}`);
    }
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    child: (fields) => makeLogger({ level, json, write, fields: { ...base, ...fields } }),
  };
}

export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
};
