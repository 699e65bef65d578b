import { bootTestCommand } from "./boot-test.js";
import { buildCommand } from "./build.js";
import type { Command } from "./command.js";
import { lockCommand } from "./lock.js";

export const commands: Command[] = [buildCommand, lockCommand, bootTestCommand];
