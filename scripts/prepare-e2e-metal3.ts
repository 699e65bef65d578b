/**
 * What `npm run e2e:metal3` needs from the network before the test runs in a network
 * namespace without one: the BMC emulator's Python packages (test/helpers/bmc-emulator.ts,
 * kept in the build cache).
 */
import { ensureSushyTools } from "../test/helpers/bmc-emulator.js";

console.log(`sushy-tools ready in ${await ensureSushyTools()}`);
