/** A CLI subcommand. Each lives in its own module under builder/commands/. */
export interface Command {
  name: string;
  summary: string;
  /** Full help text, printed by `icn-bootstrap <name> --help`. */
  usage: string;
  /** Resolves to the exit status (0 when nothing is returned). */
  run(argv: string[]): Promise<number | void>;
}
