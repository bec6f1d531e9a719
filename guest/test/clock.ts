/**
 * A loop Brain refuses (test/guest/build.test.ts builds it; it is not shipped): it reads the
 * wall clock, which adds an import (`env.Date.now`) a guest may not have (docs/agentloops.md,
 * "Build"), so scripts/build-guests.js must fail it and write no module.
 */
import { Json, readActivation, returnOk } from "../brain"

export { brain_abi_v1, brain_alloc } from "../brain"

export function brain_run(ptr: usize, len: usize): u64 {
  readActivation(ptr, len)
  return returnOk(Json.float(Date.now() as f64))
}
