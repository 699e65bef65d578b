/** A CLI subcommand. Each lives in its own module under builder/commands/. */
export interface Command {
  name: string;
  summary: string;
  /** Full help text, printed by `icn-bootstrap <name> --help`. */
  usage: string;
  run(argv: string[]): Promise<void>;
}
