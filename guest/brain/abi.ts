/**
 * The guest side of the ABI (docs/abi.md, version 1): the exports Brain looks for, the one host
 * function, the activation's input and the entry's result.
 *
 * Rules:
 * - A loop's entry file re-exports `brain_abi_v1` and `brain_alloc` from here (and
 *   `brain_transcript_tail` when it reads only the transcript's tail, `brain_events_from_end` when
 *   it wants its input's Events from the previous activation's end, `brain_configuration_unread`
 *   when it never reads its configuration, `brain_runtime_unread` when it never reads its runtime
 *   envelope, `brain_model_metadata_unread` when it reads of a model answer only its text, tool calls
 *   and reasoning) and defines
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
import { ensureRoom, report } from "./report"
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

/**
 * A loop that re-exports this marker does not read the runtime envelope (the session's id, the
 * turn's and the activation's sequences, the logical time and the seed): its input leaves
 * `runtime` out, and `Activation.runtime` reads as an empty object (so `sessionId` and the others
 * read as their empty values). Its value is not read.
 */
export const brain_runtime_unread: i32 = 1

/**
 * A loop that re-exports this marker reads of a `model` answer only `text`, `tool_calls` and
 * `reasoning`: its answers leave out the rest (`stop_reason`, `usage`, `response_id`, `model`,
 * `provider_stop_reason`), which it would otherwise parse for nothing (docs/abi.md, "Host
 * services"). Its value is not read.
 */
export const brain_model_metadata_unread: i32 = 1

/** Past this many bytes an allocation for Brain checks the memory can hold it first (`ensureRoom`). */
const LARGE: usize = 1 << 20

/**
 * Brain asks for room for the input and for every host answer here. One that the memory cannot
 * grow to hold fails the activation with a message saying so and naming the bound, not a bare trap.
 */
export function brain_alloc(size: usize): usize {
  if (size >= LARGE) ensureRoom(size, "Brain's answer (or the input) of ", " bytes does not fit the guest's memory")
  return heap.alloc(size)
}

// @ts-ignore: decorator
@external("brain", "call")
declare function hostCall(opPtr: usize, opLen: usize, reqPtr: usize, reqLen: usize): u64

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

/**
 * Calls the host service `op` with `request`; see docs/abi.md for the ops and their shapes. With
 * `textKey`, every member of that name in the answer is kept as its JSON text (`parseBytes`).
 */
export function call(op: string, request: Json, textKey: string | null = null): Answer {
  // The op's name and the request share the buffer: the name first, then the request after it.
  for (let i = 0; i < op.length; i++) if (op.charCodeAt(i) >= 0x80) fail("a host op's name is ASCII: " + op)
  const w = out()
  w.ascii(op)
  const opLen = w.len
  writeJson(w, request)
  const packed = hostCall(w.ptr, opLen, w.ptr + opLen, w.len - opLen)
  const parsed = parseBytes(<usize>(packed >>> 32), <usize>(packed & 0xffffffff), textKey)
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
