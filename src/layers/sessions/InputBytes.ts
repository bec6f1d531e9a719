/** A turn input's size against BRAIN_MAX_INPUT_BYTES, checked before anything of the turn is journaled. */
import { PayloadTooLarge } from "../../domain/Errors.js"
import { jsonStringBytes } from "../../domain/JsonText.js"
import type { TurnInput } from "../../domain/Messages.js"

/**
 * A turn input above `maxBytes` (BRAIN_MAX_INPUT_BYTES; 0 = no bound) as the refusal it gets
 * before anything is journaled, or undefined. Its UTF-8 JSON is counted (the message without
 * being copied) only when a bound on it (six bytes a character at most, as an escape) does not
 * already answer.
 */
export const inputTooLarge = (input: TurnInput, maxBytes: number): PayloadTooLarge | undefined => {
  if (maxBytes <= 0 || (input.media === undefined && 6 * input.message.length + 16 <= maxBytes)) return undefined
  // {"message":…} and, with media, ,"media":[…] around it.
  let bytes = 12 + jsonStringBytes(input.message)
  if (input.media !== undefined) {
    bytes += 11 + Math.max(0, input.media.length - 1)
    for (const m of input.media) bytes += Buffer.byteLength(JSON.stringify(m))
  }
  return bytes <= maxBytes
    ? undefined
    : new PayloadTooLarge({ message: `the turn's input is ${bytes} bytes of JSON, above BRAIN_MAX_INPUT_BYTES (${maxBytes})` })
}

/**
 * About the bytes of a turn's input, told without encoding it: its message's characters and its
 * media's. For weighing the turn's working memory (BRAIN_WORKING_MEMORY_BYTES), not for a bound.
 */
export const inputWeight = (input: TurnInput): number => {
  let bytes = input.message.length
  for (const m of input.media ?? []) for (const value of Object.values(m)) if (typeof value === "string") bytes += value.length
  return bytes
}

/**
 * About the bytes of a JSON value as a request brought it, told without encoding it: its strings'
 * characters and its keys', and a byte for every other value. For weighing a create's working
 * memory by its body (BRAIN_WORKING_MEMORY_BYTES), not for a bound; walked without recursion.
 */
export const jsonWeight = (value: unknown): number => {
  let bytes = 0
  const pending: Array<unknown> = [value]
  while (pending.length > 0) {
    const v = pending.pop()
    if (typeof v === "string") bytes += v.length
    else if (Array.isArray(v)) {
      bytes += 1
      for (const item of v) pending.push(item)
    } else if (typeof v === "object" && v !== null) {
      bytes += 1
      for (const [key, item] of Object.entries(v)) {
        bytes += key.length
        pending.push(item)
      }
    } else if (v !== undefined) bytes += 1
  }
  return bytes
}
