/**
 * The WasmHost (the embedded default): each activation a fresh instance of a module compiled once
 * at admission (wasm/Module.ts), with the host services of wasm/HostBridge.ts — on the main thread
 * (wasm/Inline.ts, the module's instrumented twin, BRAIN_WASM_INLINE_MS) once the twin is ready,
 * else, or once moved from there, on a pool of BRAIN_WASM_WORKERS worker threads: the twin there
 * too when it is ready, pinned (wasm/Pinned.ts: its host calls hold no thread), else the module as
 * admitted, blocking its thread in host calls (wasm/Activation.ts). docs/abi.md, "Where a guest runs".
 *
 * A loop's output `{"ok": value}` is the turn's result; `{"error": {code, message, …}}` fails the
 * turn with that code when it is one of Brain's failure codes (a host failure the guest passes on,
 * as the official loop does), else with `agentloop_failed`. Anything else the guest does wrong — a
 * trap, output that is not that JSON (or nests deeper than MAX_JSON_DEPTH, refused before it is
 * parsed), its compute budget, ABI misuse — is `agentloop_failed`.
 * `{"ok": value, "transcript": request}` saves `request` as a `set_transcript` call would
 * (through the activation's own host services, so a delta counts from what it last saved), in the
 * same atomic append as the activation's closing records (`Host.setTranscriptAtEnd`): a request of
 * the wrong shape fails the turn `agentloop_failed`, a refused save with the save's failure, and
 * the result is the turn's only if the two are durable together. `transcript` beside `error` is
 * ABI misuse.
 * A tool's `{"ok": output}` is outcome `ok`; `{"error": …}` and every failure are outcome `error`,
 * and so is a tool's output with a `transcript` (only a loop's output may carry one).
 */
import * as os from "node:os"
import * as path from "node:path"
import { Cause, Effect, Exit, Layer, Option, Schema } from "effect"
import { failure, FailureCode } from "../domain/Failure.js"
import { holdsNonFinite, NOT_FINITE, scanJsonText, stringifyOnce } from "../domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../domain/Limits.js"
import { eventJson } from "../domain/Events.js"
import { transcriptTail } from "../domain/TranscriptTail.js"
import { AgentloopFailed, type ActivationInput, type RuntimeEnvelope, type ToolResult } from "../services/Agentloop.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { type AdmittedModule, type ToolRun, WasmHost, type WasmHostShape } from "../services/WasmHost.js"
import { type Activation, type ActivationFailure, jsonBytes, type ActivationLimits } from "./wasm/Activation.js"
import { loopServices, toolServices } from "./wasm/HostBridge.js"
import { type InlineEnds, type InlineLimits, type RecordedCall, runInline, tryInline } from "./wasm/Inline.js"
import { InlineModules } from "./wasm/InlineModules.js"
import { admitModule, Verdicts } from "./wasm/Module.js"
import { CompileQueue } from "./wasm/Compiler.js"
import type { Answer } from "./wasm/OneThread.js"
import { onPool } from "./wasm/Pinned.js"
import { Pool } from "./wasm/Pool.js"

export interface WasmHostOptions extends ActivationLimits {
  /** Guests computing at once. */
  readonly workers: number
  /** Threads at most, guests waiting in host calls included (default WASM_THREADS_PER_WORKER × workers). */
  readonly threads?: number
  readonly moduleBytes: number
  /**
   * Milliseconds of compute the main thread lends an activation (BRAIN_WASM_INLINE_MS; Inline.ts)
   * before it moves to the pool; 0 runs every activation on the pool. Default 0.
   */
  readonly inlineMs?: number
  /**
   * Admission waits until the module's instrumented twin is made (InlineModules.ts), so its first
   * activation may already run on the main thread; by default it is made in the background and
   * activations run on the pool until then. For tests that must know where a guest runs.
   */
  readonly inlineAtAdmission?: boolean
  /** Where admitted modules' instrumented twins are kept across restarts (InlineModules.ts); none: made again in each process. */
  readonly twinCacheDir?: string
  /**
   * Whether activations on the pool run their module's twin pinned (wasm/Pinned.ts: a guest waiting
   * in a host call holds no thread). Default true; false, every one holds its thread through its
   * host calls, as a module without a twin does: for tests that must fill the pool's threads.
   */
  readonly pinning?: boolean
  /** Uploads compiling or waiting to (BRAIN_WASM_COMPILE_QUEUE) past which another is refused `overloaded`; default no bound. */
  readonly compileQueue?: number
  /** What compiles an uploaded module (default: the compiling thread, Compiler.ts); for tests that must hold a compile. */
  readonly compile?: (bytes: Uint8Array) => Promise<Answer<WebAssembly.Module>>
}

/** Where activations ran: started on the main thread, moved from it to the pool, or run on the pool from the start. */
export interface WasmHostStats {
  inline: number
  moved: number
  pool: number
}

/** Threads per compute slot by default: a turn's guest waits in host calls (journal commits, model, tools) most of its time. */
export const WASM_THREADS_PER_WORKER = 8

const isCode = Schema.is(FailureCode)

/** A loop's `ok` may come with `transcript`, a set_transcript request to save before the turn takes the result. */
type Output = { readonly ok: unknown; readonly transcript?: unknown } | { readonly transcript?: unknown; readonly error: { readonly code?: unknown; readonly message?: unknown; readonly retryable?: unknown; readonly ambiguous?: unknown; readonly details?: unknown } }

/** Why a guest's output text is refused: JSON nested past the bound every guest text has (checked before it is parsed), or a number JSON would not keep. */
class Refused {
  constructor(readonly reason: string) {}
}

/** The guest's output, or why it is refused (`Refused`); undefined when it is not `{"ok": …}` or `{"error": {…}}` JSON. */
const readOutput = (text: string): Output | Refused | undefined => {
  const scan = scanJsonText(text)
  if (scan.depth > MAX_JSON_DEPTH) return new Refused(`the guest's output nests deeper than ${MAX_JSON_DEPTH} levels (docs/abi.md, "Limits")`)
  try {
    const value = JSON.parse(text) as unknown
    if (scan.mayOverflow && holdsNonFinite(value)) return new Refused(`the guest's output is refused: ${NOT_FINITE}`)
    if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined
    // Both is neither: an output that says it succeeded and failed is not the ABI's (docs/abi.md, "The entries").
    if ("ok" in value) return "error" in value ? undefined : value as Output
    if ("error" in value && (value as { error: unknown }).error !== null && typeof (value as { error: unknown }).error === "object") {
      return value as Output
    }
    return undefined
  } catch {
    return undefined
  }
}

/** The input's fields `guestInputJson` writes, and the one it leaves out (the state's bookkeeping). */
type WrittenField = "input" | "transcript" | "configuration" | "events" | "runtime" | "unanswered" | "tool_results"
type NoneLeft<T extends never> = T
/** Compiles only while every field of ActivationInput is a WrittenField: a field added to it fails here until it is written. */
export type EveryInputFieldWritten = NoneLeft<Exclude<keyof ActivationInput, WrittenField>>

/**
 * A loop's input as its guest reads it (docs/abi.md), as JSON: the activation's input without the
 * state's own bookkeeping, and for a loop that reads the tail, the tail and where it starts; for a
 * loop that does not read its configuration, without it; for one that does not read its runtime
 * envelope (`brain_runtime_unread`), without that. Written field by field, so that each
 * Event's `data` is the payload's JSON as the journal kept it (`eventJson`) and the configuration
 * the text its first turn wrote (`stringifyOnce`), not written again; the same text
 * `JSON.stringify` gives the same object.
 *
 * The Events are the input's only part nothing bounds where it is made (the transcript has its
 * room, TranscriptRoom.ts; a turn's input BRAIN_MAX_INPUT_BYTES): a previous activation may emit or
 * be answered more than the next input can carry. So the input carries the first of them, in
 * order, as many as fit in `ioBytes` after the rest of the input, and the loop reads on with the
 * `events` host call, as after a range cut at 1,000 ("The input's Events"). Counted without a
 * second pass in the common case: a UTF-16 unit is at most 3 bytes of UTF-8, so while three times
 * the text's length is within the bound nothing is measured; past it, the bytes are counted once
 * and each further Event's as it is added.
 */
/**
 * A number as JSON.stringify writes it (a runtime's are integers; not one is ever NaN or infinite,
 * but if it were, `null`). A safe integer of ten digits or more (`now_ms`) is written as two
 * below 10^9, whose digits V8 makes without its double-to-text path: 38 against 102 ns for an
 * epoch millisecond here.
 */
const numberJson = (n: number): string => {
  if (n >= 1e9 && Number.isSafeInteger(n)) {
    const high = Math.floor(n / 1e9)
    const low = String(n - high * 1e9)
    return String(high) + "000000000".slice(low.length) + low
  }
  return Number.isFinite(n) ? String(n) : "null"
}

/** The runtime envelope's fields `runtimeJson` writes. */
type RuntimeField = "session_id" | "turn" | "activation" | "now_ms" | "seed"
/** Compiles only while every field of RuntimeEnvelope is a RuntimeField: a field added to it fails here until it is written. */
export type EveryRuntimeFieldWritten = NoneLeft<Exclude<keyof RuntimeEnvelope, RuntimeField>>

/**
 * The runtime envelope as JSON.stringify writes the object Turn.ts makes (its fields in that
 * order), by hand: its `now_ms` is above a small integer's range, and JSON.stringify's own walk of
 * the object cost a text turn about as much again as the rest of its input (docs/benchmarks.md,
 * "Wasm text turn, stop 58"). test/layers/wasm/GuestInput.test.ts holds it to JSON.stringify.
 */
export const runtimeJson = (r: RuntimeEnvelope): string =>
  `{"session_id":${JSON.stringify(r.session_id)},"turn":${numberJson(r.turn)},"activation":${numberJson(r.activation)},"now_ms":${numberJson(r.now_ms)},"seed":${numberJson(r.seed)}}`

/** `"tool_results":` and the comma after it. */
const TOOL_RESULTS_FIELD_BYTES = 16

/** The note that ends a cut-short round's tool results when `left` entries are not carried. */
const notCarriedNote = (left: number): string =>
  JSON.stringify(
    `[not carried: ${left} more tool result${left === 1 ? "" : "s"}, more than this activation's input holds beside the rest ` +
      "(BRAIN_MAX_WASM_IO_BYTES); each call's tool_call_ended or tool_call_failed Event holds its outcome: read them with the events host call]"
  )

/**
 * The Event that holds a call's outcome, by the outcome: `ok` is only ever a call that ended, a
 * timeout, cancel or unknown only one that failed; an `error` is either (a tool's own error
 * answer ends the call, a tool that threw fails it).
 */
const holdingEvent = (outcome: ToolResult["outcome"]): string =>
  outcome === "ok" ? "tool_call_ended" : outcome === "error" ? "tool_call_ended or tool_call_failed" : "tool_call_failed"

/**
 * The input's tool results (docs/abi.md, "The input's tool results") in at most `room` bytes (at
 * least `[]` when not even a note fits). All of them as they are when they fit. Else as many
 * entries as fit, in order, each at its smallest (its output replaced by a note saying where it
 * is, when that is shorter), and when some are left out, one final note (a string, not an entry)
 * saying how many and where to read them; then, in order, each carried entry's output whole while
 * the entries after it still fit at their smallest. The outputs of a round cut short are each
 * within their bound, but together — or the entries alone, for a round of thousands of calls —
 * they could pass what an input can hold, and then every next activation would fail before its
 * loop could repair the transcript: the session would never run a turn again.
 */
const toolResultsJson = (results: ReadonlyArray<ToolResult>, room: number): string => {
  const whole = JSON.stringify(results)
  if (3 * whole.length <= room || Buffer.byteLength(whole, "utf8") <= room) return whole
  const full = results.map((r) => JSON.stringify(r))
  const fullBytes = full.map((f) => Buffer.byteLength(f, "utf8"))
  const smallest = results.map((r, i) => {
    const note = JSON.stringify({
      ...r,
      output: `[not carried: this output is ${fullBytes[i]} bytes as JSON, more than this activation's input holds beside the rest (BRAIN_MAX_WASM_IO_BYTES); the call's ${holdingEvent(r.outcome)} Event holds it]`
    })
    const bytes = Buffer.byteLength(note, "utf8")
    return bytes < fullBytes[i]! ? { text: note, bytes } : { text: full[i]!, bytes: fullBytes[i]! }
  })
  // The most entries that fit at their smallest, with the final note when some are left out. An
  // array's text is its brackets and a comma between each two pieces: 1 + each piece's bytes + 1.
  let carried = -1
  let used = 0
  for (let k = 0, prefix = 1; k <= results.length; k++) {
    if (k > 0) prefix += smallest[k - 1]!.bytes + 1
    if (prefix > room) break
    const left = results.length - k
    const bytes = prefix + (left > 0 ? Buffer.byteLength(notCarriedNote(left), "utf8") + 1 : 0)
    if (bytes <= room) {
      carried = k
      used = bytes
    }
  }
  if (carried < 0) return "[]"
  // Then each carried output whole, in order, while the entries after it still fit at their smallest.
  const pieces: Array<string> = []
  for (let i = 0; i < carried; i++) {
    const grown = fullBytes[i]! - smallest[i]!.bytes
    if (grown > 0 && used + grown <= room) {
      pieces.push(full[i]!)
      used += grown
    } else pieces.push(smallest[i]!.text)
  }
  if (carried < results.length) pieces.push(notCarriedNote(results.length - carried))
  return `[${pieces.join(",")}]`
}

export const guestInputJson = (
  input: ActivationInput,
  module: Pick<AdmittedModule, "tail" | "tailMessages" | "configurationUnread"> & { readonly runtimeUnread?: boolean },
  ioBytes: number
): string => {
  const tail = module.tail ? transcriptTail(input.transcript, input.unanswered, module.tailMessages) : undefined
  const before = `{${input.input === undefined ? "" : `"input":${JSON.stringify(input.input)},`}"transcript":${JSON.stringify(tail === undefined ? input.transcript : tail.transcript)},${
    tail === undefined ? "" : `"transcript_start":${tail.transcript_start},`
  }`
  const after = `${module.configurationUnread ? "" : `"configuration":${stringifyOnce(input.configuration)},`}"events":[`
  const end = module.runtimeUnread === true ? "]}" : `],"runtime":${runtimeJson(input.runtime)}}`
  const head = input.tool_results === undefined
    ? before + after
    : `${before}"tool_results":${toolResultsJson(input.tool_results, ioBytes - Buffer.byteLength(before + after + end, "utf8") - TOOL_RESULTS_FIELD_BYTES)},${after}`
  let events = ""
  // At most this many bytes so far (3 a UTF-16 unit), until it passes the bound; then the exact count.
  let most = 3 * (head.length + end.length)
  let bytes = -1
  for (let i = 0; i < input.events.length; i++) {
    const piece = (i === 0 ? "" : ",") + eventJson(input.events[i]!)
    if (bytes < 0) {
      most += 3 * piece.length
      if (most <= ioBytes) {
        events += piece
        continue
      }
      bytes = Buffer.byteLength(head, "utf8") + Buffer.byteLength(events, "utf8") + Buffer.byteLength(end, "utf8")
    }
    bytes += Buffer.byteLength(piece, "utf8")
    if (bytes > ioBytes) break
    events += piece
  }
  return head + events + end
}

const loopFailed = (message: string) => new AgentloopFailed({ failure: failure("agentloop_failed", message) })

export const make = (options: WasmHostOptions) =>
  Effect.gen(function*() {
    const workers = Math.max(1, options.workers)
    const pool = new Pool({ compute: workers, threads: options.threads ?? WASM_THREADS_PER_WORKER * workers })
    yield* Effect.addFinalizer(() => pool.close)
    const limits: ActivationLimits = { computeMs: options.computeMs, ioBytes: options.ioBytes, memoryBytes: options.memoryBytes }
    const inlineMs = options.inlineMs ?? 0
    const inlineLimits: InlineLimits = { computeMs: options.computeMs, ioBytes: options.ioBytes, memoryBytes: options.memoryBytes, inlineMs }
    const twins = new InlineModules(options.twinCacheDir)
    /** The twin an activation on the pool runs pinned, if any. */
    const pinnedTwin = (moduleId: string) => (options.pinning === false ? undefined : twins.twin(moduleId))
    const compiling = new CompileQueue(options.compileQueue, options.compile)
    // What this host decided of each module it was given, by content hash (wasm/Module.ts).
    const verdicts = new Verdicts()

    const stats: WasmHostStats = { inline: 0, moved: 0, pool: 0 }

    /**
     * `session`'s activation on the main thread when its module's twin is ready and the session
     * is not cooling down after a move (InlineModules.ts), else (or once moved) on the pool; then
     * `done` with its output, or `failed`.
     */
    const run = <A, E>(activation: Activation, session: string, ends: Omit<InlineEnds<A, E>, "moved">): Effect.Effect<A, E> => {
      const twin = inlineMs > 0 ? twins.take(activation.moduleId, session) : undefined
      if (twin === undefined) {
        stats.pool++
        return Effect.matchEffect(onPool(pool, limits, activation, pinnedTwin(activation.moduleId)), { onFailure: ends.failed, onSuccess: ends.done })
      }
      stats.inline++
      activation.began?.()
      return runInline(twin, activation, inlineLimits, {
        done: (output) => {
          twins.completed(activation.moduleId, session)
          return ends.done(output)
        },
        moved: (_reason, calls) => {
          stats.moved++
          twins.moved(activation.moduleId, session)
          return Effect.matchEffect(onPool(pool, limits, activation, pinnedTwin(activation.moduleId), calls), { onFailure: ends.failed, onSuccess: ends.done })
        },
        failed: ends.failed
      })
    }

    /** A tool's output text as its run. */
    const toolRunOf = (text: string): ToolRun => {
      const output = readOutput(text)
      if (output instanceof Refused) return { _tag: "error", output: { message: output.reason } }
      if (output === undefined) return { _tag: "error", output: { message: 'the tool\'s output is not {"ok": …} or {"error": {…}} JSON' } }
      if ("transcript" in output) return { _tag: "error", output: { message: "a tool's output may not carry a transcript (only a loop's may)" } }
      return "ok" in output ? { _tag: "ok", output: output.ok } : { _tag: "error", output: output.error }
    }
    /** Refused a thread by the closed pool (the server is stopping): stopped, as a loop refused so fails interrupted; else the tool's error. */
    const toolFailed = (f: ActivationFailure): ToolRun => f._tag === "stopped" ? { _tag: "stopped", message: f.message } : { _tag: "error", output: { message: f.message } }

    const service: WasmHostShape & { readonly stats: WasmHostStats } = {
      stats,
      admit: (bytes, admission) =>
        admitModule(
          bytes,
          { maxModuleBytes: admission?.shipped === true ? Infinity : options.moduleBytes, maxMemoryBytes: options.memoryBytes },
          verdicts,
          admission ?? {},
          compiling
        ).pipe(
          Effect.tap((module) => {
            // Its twin runs on the main thread, and on worker threads pinned (wasm/Pinned.ts) with BRAIN_WASM_INLINE_MS=0 too.
            const prepared = twins.prepare(module.hash, bytes)
            return options.inlineAtAdmission === true ? prepared : Effect.asVoid(Effect.forkDaemon(prepared))
          })
        ),
      runLoop: (module, input, host) => {
        // The same services for the activation and its output's transcript: a delta's base is what the activation last saved.
        const services = loopServices(host, input.transcript, module)
        // The input as text: the main thread writes it into the guest's memory as UTF-8 itself.
        const activation: Activation = { moduleId: module.hash, module: module.module, memory: module.memory, entry: "brain_run", input: guestInputJson(input, module, options.ioBytes), perform: services }
        return run(activation, input.runtime.session_id, {
          // Refused a thread by the closed pool (the server is stopping): interrupted, as the stop's other refusals are.
          failed: (f) => Effect.fail(f._tag === "stopped" ? new AgentloopFailed({ failure: failure("interrupted", f.message) }) : loopFailed(f.message)),
          done: (text) => {
            const output = readOutput(text)
            if (output instanceof Refused) return Effect.fail(loopFailed(output.reason))
            if (output === undefined) return Effect.fail(loopFailed('the guest\'s output is not {"ok": …} or {"error": {…}} JSON'))
            if ("ok" in output) {
              if (!("transcript" in output)) return Effect.succeed(output.ok)
              // Checked as the set_transcript call it stands for; committed with the turn's closing records.
              return Effect.matchEffect(services.save(output.transcript), {
                onFailure: (e) =>
                  Effect.fail(
                    e._tag === "TranscriptRefused"
                      ? loopFailed(`the output's transcript is not a valid set_transcript request: ${e.reason}`)
                      : new AgentloopFailed({ failure: e.failure })
                  ),
                onSuccess: () => Effect.succeed(output.ok)
              })
            }
            if ("transcript" in output) return Effect.fail(loopFailed('the guest\'s output carries a transcript with an error: a transcript goes only with {"ok": …}'))
            const e = output.error
            const message = typeof e.message === "string" ? e.message : "the guest failed"
            return Effect.fail(
              new AgentloopFailed({
                failure: isCode(e.code)
                  ? failure(e.code, message, {
                    retryable: e.retryable === true,
                    ambiguous: e.ambiguous === true,
                    ...(e.details !== undefined && e.details !== null ? { details: e.details } : {})
                  })
                  : failure("agentloop_failed", message)
              })
            )
          }
        })
      },
      runTool: (module, activation, services) =>
        run(
          {
            moduleId: module.hash,
            module: module.module,
            memory: module.memory,
            entry: "brain_tool",
            input: jsonBytes(activation),
            perform: toolServices(services),
            ...(services.began !== undefined ? { began: services.began } : {})
          },
          activation.call.session_id,
          { failed: (f) => Effect.succeed(toolFailed(f)), done: (text) => Effect.succeed(toolRunOf(text)) }
        ),
      tryTool: (module, activation, services) => {
        const twin = inlineMs > 0 ? twins.tryable(module.hash, activation.call.session_id) : undefined
        if (twin === undefined) return undefined
        const perform = toolServices(services)
        const exit = tryInline(twin, { moduleId: module.hash, module: module.module, memory: module.memory, entry: "brain_tool", input: jsonBytes(activation), perform }, inlineLimits)
        // It reached a host call and was given up: `runTool` runs it from its start.
        if (exit === undefined) {
          twins.gaveUp(module.hash)
          return undefined
        }
        stats.inline++
        if (Exit.isFailure(exit)) {
          const f = Cause.failureOption(exit.cause)
          // A defect stays one, as `runTool` would die of it.
          return Option.isSome(f) ? Exit.succeed(toolFailed(f.value)) : Exit.failCause(exit.cause as Cause.Cause<never>)
        }
        if (exit.value._tag === "moved") {
          // Past what the main thread lends: counted as a move, and run from its start on the pool.
          stats.moved++
          twins.moved(module.hash, activation.call.session_id)
          return undefined
        }
        twins.completed(module.hash, activation.call.session_id, true)
        return Exit.succeed(toolRunOf(exit.value.output))
      }
    }
    return service
  })

/** The WasmHost with ServerConfig's limits. */
export const layer = Layer.scoped(
  WasmHost,
  Effect.flatMap(ServerConfig, (config) =>
    make({
      workers: config.wasmWorkers ?? os.availableParallelism(),
      ...(config.wasmThreads !== undefined ? { threads: config.wasmThreads } : {}),
      inlineMs: config.wasmInlineMs,
      twinCacheDir: path.join(path.resolve(config.dataDir), "agentloops", "twins"),
      memoryBytes: config.maxWasmMemoryBytes,
      computeMs: config.maxWasmComputeMs,
      ioBytes: config.maxWasmIoBytes,
      moduleBytes: config.maxWasmModuleBytes,
      compileQueue: config.wasmCompileQueue
    }))
)

/** Runs a moved activation again on the pool, blocking a thread: the host calls it made are answered from `calls` (wasm/Pinned.ts, `onPool`). */
export const replayed = (pool: Pool, limits: ActivationLimits, activation: Activation, calls: ReadonlyArray<RecordedCall>): Effect.Effect<string, ActivationFailure> =>
  onPool(pool, limits, activation, undefined, calls)
