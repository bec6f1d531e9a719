/**
 * How Brain cuts a failure's message that passes MAX_FAILURE_MESSAGE_BYTES: at a character's
 * start, followed by a marker that says so. Shared by the failures Brain builds (Failure.ts
 * `boundedMessage`) and a guest's `brain.fail` message, which is cut as it is read from the
 * guest's memory, on whichever thread runs it (so this module imports nothing heavy).
 */
import { MAX_FAILURE_MESSAGE_BYTES } from "./Limits.js"

/** What ends a cut message: how many bytes were left out, and the bound. */
export const cutMarker = (dropped: number): string =>
  ` … [cut: ${dropped} more bytes; Brain keeps at most ${MAX_FAILURE_MESSAGE_BYTES} bytes of a failure's message]`

/** A text's trailing cut marker, with its count of bytes left out (`cutMarker`'s form, for the bound Brain keeps). */
const MARKER_AT_END = new RegExp(` … \\[cut: (\\d+) more bytes; Brain keeps at most ${MAX_FAILURE_MESSAGE_BYTES} bytes of a failure's message\\]$`)

/**
 * A text cut before (it ends with `cutMarker`): the text before its marker and the bytes the
 * marker says were left out; undefined for a text that does not end with one. So that a message
 * cut where it was read (a guest's `brain.fail`) and bounded again where it is recorded is cut
 * once, with the count of all that was left out.
 */
export const cutBefore = (text: string): { readonly kept: string; readonly dropped: number } | undefined => {
  const found = MARKER_AT_END.exec(text)
  return found === null ? undefined : { kept: text.slice(0, found.index), dropped: Number(found[1]) }
}

/** The largest index at most `max` where a character of the UTF-8 `bytes` starts (`bytes.length` when it is shorter). */
export const characterStart = (bytes: Uint8Array, max: number): number => {
  if (bytes.length <= max) return bytes.length
  let end = max
  // Back over continuation bytes (10xxxxxx): at most 3 in well-formed UTF-8.
  while (end > 0 && end > max - 3 && (bytes[end]! & 0xc0) === 0x80) end--
  return end
}

/**
 * A guest's failure message from its UTF-8 `bytes` (in its memory): decoded whole when within
 * the bound, else only its start, with the marker; the rest is never read. `decode` throws when
 * the bytes it is given are not UTF-8.
 */
export const guestMessage = (bytes: Uint8Array, decode: (bytes: Uint8Array) => string): string => {
  const end = characterStart(bytes, MAX_FAILURE_MESSAGE_BYTES)
  return end === bytes.length ? decode(bytes) : decode(bytes.subarray(0, end)) + cutMarker(bytes.length - end)
}

/**
 * The message of a guest's `brain.fail`, from its `bytes` (in its memory): `guestMessage` decoded
 * by `decoder` (fatal: it throws on bytes that are not UTF-8), or, when they are not UTF-8, a
 * message that says so. One reading for the worker thread (GuestWorker.ts) and the main thread
 * (Inline.ts), so a guest fails with the same message on either.
 */
export const guestFailureMessage = (bytes: Uint8Array, decoder: { decode(bytes: Uint8Array): string }): string => {
  try {
    return guestMessage(bytes, (b) => decoder.decode(b))
  } catch {
    return "the guest's failure message is not UTF-8"
  }
}
