import type { Command } from "./command.js";
import { fetchCommand } from "./fetch.js";
import { lockArtifactsCommand } from "./lock-artifacts.js";

export const commands: Command[] = [fetchCommand, lockArtifactsCommand];
