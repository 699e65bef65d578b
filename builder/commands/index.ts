import { bootTestCommand } from "./boot-test.js";
import { buildCommand } from "./build.js";
import { bundleCommand } from "./bundle.js";
import { deployCommand } from "./deploy.js";
import type { Command } from "./command.js";
import { fetchCommand } from "./fetch.js";
import { lockCommand } from "./lock.js";
import { lockArtifactsCommand } from "./lock-artifacts.js";
import { lockImagesCommand } from "./lock-images.js";
import { siteCommand } from "./site.js";
import { uploadCommand } from "./upload.js";
import { verifyCommand } from "./verify.js";

export const commands: Command[] = [
  buildCommand,
  lockCommand,
  lockArtifactsCommand,
  lockImagesCommand,
  fetchCommand,
  bootTestCommand,
  verifyCommand,
  siteCommand,
  uploadCommand,
  bundleCommand,
  deployCommand,
];
