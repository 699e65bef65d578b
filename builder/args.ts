import { parseArgs, type ParseArgsConfig } from "node:util";
import { UserError } from "./errors.js";

/** node:util parseArgs, with its errors turned into UserErrors that point at --help. */
export function parseCommandArgs<T extends NonNullable<ParseArgsConfig["options"]>>(command: string, argv: string[], options: T, allowPositionals = false) {
  try {
    return parseArgs({ args: argv, options, allowPositionals, strict: true });
  } catch (error) {
    throw new UserError(`${command}: ${(error as Error).message}`, `see 'icn-bootstrap ${command} --help'`);
  }
}
