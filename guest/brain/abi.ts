/**
 * The guest side of the ABI (docs/abi.md, version 1): the exports Brain looks for, the one host
 * function, the activation's input and the entry's result.
 *
 * Rules:
 * - A loop's entry file re-exports `brain_abi_v1` and `brain_alloc` from here (and
 *   `brain_transcript_tail` when it reads only the transcript's tail, `brain_events_from_end` when
 *   it wants its input's Events from the previous activation's end, `brain_configuration_unread`
 *   when it never reads its configuration) and defines
 *   `brain_run` (or `brain_tool`); it reads its input with `readInput` and returns `returnOk(...)`
 *   or `returnError(...)` (a loop may return `returnOkSaving(...)`, its last save riding on it).
 * - Memory comes from AssemblyScript's stub runtime, which never frees: every activation gets a
 *   fresh instance, so a bump allocator is the fastest correct choice. `brain_alloc` hands Brain
 *   bytes from the same heap. To keep the total small, every host request and the result are
 *   written into one reused buffer instead of a new one each time.
 * - `call` answers `{"ok": v}` as `Answer.value` and `{"error": {...}}` as `Answer.error`; an answer
 *   that is neither is Brain breaking the ABI and fails the activation.
 * - A failed assertion, a `throw` or a misused value (`abort`) reaches Brain as `brain.fail`, with
 *   the message and where it happened; the build points `abort` at `brainAbort`. Reporting does not
 *   allocate, so it works when an allocation is what failed.
 */
import { Json, parseBytes, Utf8Writer, writeJson } from "./json"
import { Transcript } from "./transcript"

/** The version marker: this module speaks ABI version 1. */
export const brain_abi_v1: i32 = 1

/**
 * A loop that re-exports this marker reads the transcript's tail: its input's `transcript` holds
 * the saved transcript from `transcript_start` on, and older messages are read with
 * `transcriptRange` (docs/abi.md, "The transcript's tail"). Its value is not read.
 */
export const brain_transcript_tail: i32 = 1

/**
 * A loop that re-exports this marker is given its input's Events from the previous activation's
 * end on (`activation_ended` or `activation_failed`, then the turn's end and everything after),
 * not from the previous activation's start: how the previous turn ended, not each step it took
 * (docs/abi.md, "The input's Events"). Its value is not read.
 */
export const brain_events_from_end: i32 = 1

/**
 * A loop that re-exports this marker does not read the session's configuration: its input leaves
 * `configuration` out, and `Activation.configuration` reads as an empty object. The model, the
 * tools and the system prompt still come from the configuration: Brain adds them to every model
 * call itself (docs/abi.md, "The entries"). Its value is not read.
 */
export const brain_configuration_unread: i32 = 1

/** Brain asks for room for the input and for every host answer here. */
export function brain_alloc(size: usize): usize {
  return heap.alloc(size)
}

// @ts-ignore: decorator
@external("brain", "call")
declare function hostCall(opPtr: usize, opLen: usize, reqPtr: usize, reqLen: usize): u64

// @ts-ignore: decorator
@external("brain", "fail")
declare function hostFail(msgPtr: usize, msgLen: usize): void

/** A host call's error, as Brain sent it (a Failure: docs/api.md lists the codes). */
export class HostError {
  constructor(
    public code: string,
    public message: string,
    public retryable: bool,
    public ambiguous: bool,
    /** What else Brain knows (a provider's status, its retry-after advice), or null. */
    public details: Json | null
  ) {}
}

/** A host call's answer: `value` when it succeeded (`ok`), else `error`. */
export class Answer {
  constructor(public value: Json, public error: HostError | null) {}
  get ok(): bool {
    return this.error === null
  }
}

/**
 * Every request and the result are written here (see the rules above). Made on first use: a
 * library module must not allocate at the top level, where asc may run it before the stub
 * runtime's heap is set up.
 */
let shared: Utf8Writer | null = null

function out(): Utf8Writer {
  let w = shared
  // 512 bytes to start: a text turn's request and output are about 100 each, and it doubles as a longer one
  // needs. Every byte of it lies below what the activation allocates next, so an instance put back has it
  // zeroed whether or not the guest wrote it (src/layers/wasm/Spares.ts): 4 KiB cost each turn 3.5 KiB of
  // memory written for nothing (docs/benchmarks.md, "Wasm text turn, stop 58").
  if (w === null) shared = w = new Utf8Writer(512)
  w.reset()
  return w
}

/** Calls the host service `op` with `request`; see docs/abi.md for the ops and their shapes. */
export function call(op: string, request: Json): Answer {
  // The op's name and the request share the buffer: the name first, then the request after it.
  for (let i = 0; i < op.length; i++) if (op.charCodeAt(i) >= 0x80) fail("a host op's name is ASCII: " + op)
  const w = out()
  w.ascii(op)
  const opLen = w.len
  writeJson(w, request)
  const packed = hostCall(w.ptr, opLen, w.ptr + opLen, w.len - opLen)
  const parsed = parseBytes(<usize>(packed >>> 32), <usize>(packed & 0xffffffff))
  if (!parsed.ok) fail("Brain's answer to " + op + " is not JSON: " + parsed.error + " at byte " + parsed.offset.toString())
  const answer = parsed.value!
  if (answer.isObject()) {
    const ok = answer.get("ok")
    if (ok !== null) return new Answer(ok, null)
    const error = answer.get("error")
    if (error !== null && error.isObject()) {
      return new Answer(
        Json.null(),
        new HostError(
          error.getString("code", "unknown"),
          error.getString("message"),
          error.getBool("retryable"),
          error.getBool("ambiguous"),
          error.get("details")
        )
      )
    }
  }
  fail("Brain's answer to " + op + " is neither {\"ok\"} nor {\"error\"}")
  return unreachable()
}

/** Parses the entry's input; input that is not JSON fails the activation. */
export function readInput(ptr: usize, len: usize): Json {
  const parsed = parseBytes(ptr, len)
  if (!parsed.ok) fail("the input is not JSON: " + parsed.error + " at byte " + parsed.offset.toString())
  return parsed.value!
}

/** The entry's result `{"ok": value}`: return it from `brain_run` or `brain_tool`. */
export function returnOk(value: Json): u64 {
  return finish(Json.object().set("ok", value))
}

/**
 * The loop's result `{"ok": value, "transcript": {"keep", "append"}}`: Brain saves `transcript` as
 * `setTranscriptDelta` would, then takes `value` — one host call fewer than saving and returning.
 * `transcript` is left out when nothing changed since the last save. If the save is refused or
 * fails (a cancel, the journal), the turn fails with that failure, as a loop passing on a failed
 * `setTranscriptDelta`'s error would. Only for `brain_run`: a tool's output may not carry one.
 */
export function returnOkSaving(value: Json, transcript: Transcript): u64 {
  const result = Json.object().set("ok", value)
  if (transcript.changed) result.set("transcript", transcript.delta())
  return finish(result)
}

/** The entry's result `{"error": {"code", "message"}}`: the activation (or tool call) fails with it. */
export function returnError(code: string, message: string): u64 {
  return returnErrorValue(Json.object().set("code", Json.string(code)).set("message", Json.string(message)))
}

/**
 * The entry's result `{"error": {"code", "message", "retryable", "ambiguous", "details"?}}` passing
 * on a host call's error as it came: the turn fails with that code and its flags, so a client is
 * told what Brain knows (an effect that may have happened stays `ambiguous`).
 */
export function returnHostError(e: HostError): u64 {
  const error = Json.object()
    .set("code", Json.string(e.code))
    .set("message", Json.string(e.message))
    .set("retryable", Json.bool(e.retryable))
    .set("ambiguous", Json.bool(e.ambiguous))
  const details = e.details
  if (details !== null) error.set("details", details)
  return returnErrorValue(error)
}

/** The entry's result `{"error": error}`, for a tool whose error carries more than a code and a message. */
export function returnErrorValue(error: Json): u64 {
  return finish(Json.object().set("error", error))
}

function finish(result: Json): u64 {
  const w = out()
  writeJson(w, result)
  return (<u64>w.ptr << 32) | <u64>w.len
}

/** Gives up: the activation fails (`agentloop_failed`) with `message`. Does not return. */
export function fail(message: string): void {
  report(message, null, 0, 0)
}

/** The `abort` the build installs (`--use abort=guest/brain/abi/brainAbort`). */
export function brainAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  report(message !== null ? message : "abort", fileName, line, column)
}

/** Room for a failure's text, reserved up front: reporting must not allocate (the heap may be why). */
const REPORT_BYTES: usize = 4096
const reportText = memory.data(<i32>REPORT_BYTES)
let reportLen: usize = 0
let reporting = false

/**
 * Sends `message (file:line:column)` to `brain.fail` as UTF-8, without allocating: cut at
 * REPORT_BYTES on a character boundary, a lone surrogate written as U+FFFD. A failure while
 * reporting traps (the activation fails all the same).
 */
function report(message: string, fileName: string | null, line: u32, column: u32): void {
  if (reporting) unreachable()
  reporting = true
  reportLen = 0
  append(message)
  if (fileName !== null) {
    append(" (")
    append(fileName)
    append(":")
    appendNumber(line)
    append(":")
    appendNumber(column)
    append(")")
  }
  hostFail(reportText, reportLen)
  unreachable()
}

function append(s: string): void {
  for (let i = 0; i < s.length; i++) {
    let c = <u32>s.charCodeAt(i)
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const next = <u32>s.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) {
        if (reportLen + 4 > REPORT_BYTES) return
        const cp = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00)
        const at = reportText + reportLen
        store<u8>(at, <u8>(0xf0 | (cp >>> 18)))
        store<u8>(at + 1, <u8>(0x80 | ((cp >>> 12) & 0x3f)))
        store<u8>(at + 2, <u8>(0x80 | ((cp >>> 6) & 0x3f)))
        store<u8>(at + 3, <u8>(0x80 | (cp & 0x3f)))
        reportLen += 4
        i++
        continue
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd
    const need: usize = c < 0x80 ? 1 : c < 0x800 ? 2 : 3
    if (reportLen + need > REPORT_BYTES) return
    const at = reportText + reportLen
    if (need == 1) store<u8>(at, <u8>c)
    else if (need == 2) {
      store<u8>(at, <u8>(0xc0 | (c >>> 6)))
      store<u8>(at + 1, <u8>(0x80 | (c & 0x3f)))
    } else {
      store<u8>(at, <u8>(0xe0 | (c >>> 12)))
      store<u8>(at + 1, <u8>(0x80 | ((c >>> 6) & 0x3f)))
      store<u8>(at + 2, <u8>(0x80 | (c & 0x3f)))
    }
    reportLen += need
  }
}

function appendNumber(n: u32): void {
  let div: u32 = 1
  while (n / div >= 10) div *= 10
  for (; div > 0; div /= 10) {
    if (reportLen >= REPORT_BYTES) return
    store<u8>(reportText + reportLen++, <u8>(48 + (n / div) % 10))
  }
}
