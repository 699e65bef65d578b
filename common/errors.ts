/**
 * Shared by the builder and the BPA (which runs on the appliance and must not import the builder).
 *
 * An error caused by the user's input or environment. It carries the fix, so the
 * CLI can print "what went wrong" and "what to do" instead of a stack trace.
 */
export class UserError extends Error {
  constructor(
    message: string,
    readonly hint?: string,
  ) {
    super(message);
    this.name = "UserError";
  }
}

export function formatError(error: unknown): string {
  if (error instanceof UserError) {
    return error.hint ? `error: ${error.message}\n  fix: ${error.hint}` : `error: ${error.message}`;
  }
  if (error instanceof Error) return `error: ${error.stack ?? error.message}`;
  return `error: ${String(error)}`;
}
