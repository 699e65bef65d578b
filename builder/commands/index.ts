import type { Command } from "./command.js";

export const commands: Command[] = [];
