import { formatError } from "./errors.js";
import { commands } from "./commands/index.js";
import { installInterruptHandlers } from "./interrupt.js";
import { pinHostEnvironment } from "./reproducible.js";

function mainHelp(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    "icn-bootstrap: builds the offline ICN bootstrap appliance (USB disk image and qcow2 VM image)",
    "",
    "usage: icn-bootstrap <command> [options]",
    "",
    "commands:",
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    "",
    "Run 'icn-bootstrap <command> --help' for a command's options.",
  ].join("\n");
}

const USER_FILES = new Set(["site", "upload"]);

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    console.log(mainHelp());
    return name ? 0 : 2;
  }
  const command = commands.find((c) => c.name === name);
  if (!command) {
    console.error(`error: unknown command '${name}'\n\n${mainHelp()}`);
    return 2;
  }
  if (rest.includes("--help") || rest.includes("-h")) {
    console.log(command.usage);
    return 0;
  }
  // Not for the commands that write the user's own files (a site folder holds Secrets): those keep the user's umask.
  if (!USER_FILES.has(command.name)) pinHostEnvironment();
  return (await command.run(rest)) ?? 0;
}

installInterruptHandlers();
main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(formatError(error));
    process.exit(1);
  },
);
