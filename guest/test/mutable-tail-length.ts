/**
 * A loop Brain refuses (test/guest/build.test.ts builds it; it is not shipped): its
 * `brain_transcript_tail_length` is a mutable global, which admission refuses (docs/abi.md, "The
 * transcript's tail"), so scripts/build-guests.js must fail it and write no module.
 */
import { Json, readActivation, returnOk } from "../brain"

export { brain_abi_v1, brain_alloc, brain_transcript_tail } from "../brain"

export let brain_transcript_tail_length: i32 = 3

export function brain_run(ptr: usize, len: usize): u64 {
  readActivation(ptr, len)
  return returnOk(Json.string("fine"))
}
