/**
 * Interruption at every step of a turn, by fault injection (DESIGN §3, §6; seed "Effects happen
 * after commit", "Suspension and recovery").
 *
 * A reference turn of the official loop (a model reply asking for two tools, then a text reply)
 * is run once over the file journal to count its appends, n. Then, for every k in 1..n, a fresh
 * runtime on a fresh data directory runs the same turn with one fault at the k-th append of the
 * turn:
 *
 * - lost:    the append fails with JournalWriteFailed and nothing reaches the disk;
 * - landed:  the records reach the disk but the append still reports JournalWriteFailed (the
 *            Journal contract allows both); in both cases the failure is sticky for the session;
 * - cancel:  the append is held, `sessions.interrupt` is requested, then the append is let go;
 * - stop:    the append is held, the runtime's scope is closed (a server stop interrupts the turn
 *            fiber), then the append is let go.
 *
 * After each case the journal written by the faulty process is checked (effects closed once or,
 * after the journal refused writes, left pending; no effect dispatched twice or without its
 * durable started record; effects inside their activation; turns closed at most once; dense
 * sequences). Then a new runtime over the same data directory stands in for the restarted
 * process: its first access (a read) must record every pending effect as an ambiguous failure and
 * an open turn as interrupted, dispatch nothing, and the next turn must work and see what happened.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Scope } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { Message } from "../../src/domain/Messages.js"
import { EffectKinds, type JournalRecord } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import { Journal, type JournalShape, JournalWriteFailed } from "../../src/services/Journal.js"
import type { ModelRequest } from "../../src/domain/Model.js"
import { Sessions, type TurnOutcome } from "../../src/services/Sessions.js"
import type { ToolHandler } from "../../src/layers/ToolsInProcess.js"
import { Agentloops } from "../../src/services/Agentloop.js"
import type { WasmHostShape } from "../../src/services/WasmHost.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"
import { echoing, wat } from "../support/wat.js"

/** Milliseconds one faulty case (turn, stop, restart, next turn) may take before it counts as a hang. */
const CASE_DEADLINE_MS = 10_000
/** Milliseconds a stop is given to show whether it closes the turn while an append is held. */
const STOP_SETTLE_MS = 50

/**
 * Where the turn's two tools run: in-process handlers, or a Wasm tool on the main thread, each
 * call tried to its end right after the round's starts are durable (both outcomes then in one
 * append: docs/runtime.md).
 */
type ToolsKind = "in-process" | "wasm"

/** The session: two tool calls in one round, then an answer; `module` names the Wasm tool. */
const createBody = (module?: string) => ({
  model: {
    provider: "scripted" as const,
    replies: [
      { tool_calls: [{ name: "alpha", input: { n: 1 } }, { name: "beta", input: { n: 2 } }] },
      { text: "done" }
    ]
  },
  tools: module === undefined ? [{ name: "alpha" }, { name: "beta" }] : [{ name: "alpha", module }, { name: "beta", module }]
})
const CREATE = createBody()

/**
 * Guests on the main thread (BRAIN_WASM_INLINE_MS), twins made at admission; an allowance no busy
 * test machine reaches, so that no call moves to the pool and every case makes the reference's appends.
 */
const WASM = { workers: 1, memoryBytes: 4 * 1024 * 1024, computeMs: 5_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024, inlineMs: 1_000, inlineAtAdmission: true }

/** The tool: it answers its input. */
const ECHO_TOOL = echoing("brain_tool")

// ---------------------------------------------------------------------------------------------
// The instrumented journal and dispatch counter

type Fault =
  | { readonly _tag: "none" }
  | { readonly _tag: "fail"; readonly at: number; readonly landed: boolean }
  | {
    readonly _tag: "hold"
    readonly at: number
    readonly reached: Deferred.Deferred<void>
    readonly release: Deferred.Deferred<void>
    /** After the release, fail the held append (nothing written) instead of letting it through. */
    readonly thenFail?: boolean
  }

interface Dispatch {
  readonly kind: "model" | "tool"
  readonly sequence: number
  /** Whether the started record's append had resolved (durable) when the dispatch happened. */
  readonly durable: boolean
  readonly request?: ModelRequest
}

/** What one process saw: the turn's appends (by kinds), durable sequences and dispatches. */
class Probe {
  armed = false
  readonly appends: Array<ReadonlyArray<string>> = []
  readonly durable = new Set<number>()
  readonly dispatches: Array<Dispatch> = []
  broken: JournalWriteFailed | undefined = undefined
  /** Appends closing the activation that reached the wrapper while an earlier append was held. */
  closedWhileHeld = 0
  holding = false
}

/** The file journal wrapped: counts the appends after `armed`, and injects `fault` at one of them. */
const faultyJournal = (dataDir: string, fault: Fault, probe: Probe) =>
  Layer.scoped(
    Journal,
    Effect.gen(function*() {
      // orDie: a data directory that cannot be opened is a broken test setup, not a case to check.
      const base = yield* JournalFile.make({ dataDir, lockWaitMs: 0 }).pipe(Effect.provide(nodeFiles), Effect.orDie)
      const landed = (session: SessionId, entries: Parameters<JournalShape["append"]>[1], options: Parameters<JournalShape["append"]>[2]) =>
        Effect.tap(base.append(session, entries, options), (seqs) => Effect.sync(() => seqs.forEach((s) => probe.durable.add(s))))
      const append: JournalShape["append"] = (session, entries, options) =>
        Effect.suspend(() => {
          if (!probe.armed) return landed(session, entries, options)
          if (probe.broken) return Effect.fail(probe.broken)
          if (probe.holding && entries.some((e) => e.kind.startsWith("activation_"))) probe.closedWhileHeld++
          probe.appends.push(entries.map((e) => e.kind))
          const k = probe.appends.length
          if (fault._tag === "fail" && k === fault.at) {
            const broken = new JournalWriteFailed({ session, reason: `injected failure of append ${k}` })
            probe.broken = broken
            return fault.landed ? Effect.zipRight(landed(session, entries, options), Effect.fail(broken)) : Effect.fail(broken)
          }
          if (fault._tag === "hold" && k === fault.at) {
            probe.holding = true
            const broken = new JournalWriteFailed({ session, reason: `injected failure of held append ${k}` })
            return Deferred.succeed(fault.reached, undefined).pipe(
              Effect.zipRight(Deferred.await(fault.release)),
              Effect.tap(() => Effect.sync(() => void (probe.holding = false))),
              Effect.zipRight(
                fault.thenFail
                  ? Effect.suspend(() => {
                    probe.broken = broken
                    return Effect.fail(broken)
                  })
                  : landed(session, entries, options)
              )
            )
          }
          return landed(session, entries, options)
        })
      return { ...base, append } satisfies JournalShape
    })
  )

const countingTool = (probe: Probe): ToolHandler => (input, invocation) =>
  Effect.sync(() => {
    probe.dispatches.push({ kind: "tool", sequence: invocation.sequence, durable: probe.durable.has(invocation.sequence) })
    return { outcome: "ok" as const, output: { echo: input } }
  })

/** The WebAssembly host, counting each tool call it runs (a try that went to its end, or a run); a try given up ran nothing. */
const countingHost = (probe: Probe) => (host: WasmHostShape): WasmHostShape => {
  const dispatched = (sequence: number) => probe.dispatches.push({ kind: "tool", sequence, durable: probe.durable.has(sequence) })
  return {
    ...host,
    runTool: (module, activation, services) =>
      Effect.suspend(() => {
        dispatched(activation.call.sequence)
        return host.runTool(module, activation, services)
      }),
    tryTool: (module, activation, services) => {
      const run = host.tryTool?.(module, activation, services)
      if (run !== undefined) dispatched(activation.call.sequence)
      return run
    }
  }
}

const runtime = (dataDir: string, fault: Fault, probe: Probe, tools: ToolsKind = "in-process") =>
  runtimeLayer({
    journal: faultyJournal(dataDir, fault, probe),
    ...(tools === "wasm" ? { wasm: WASM, wasmHost: countingHost(probe) } : { tools: { alpha: countingTool(probe), beta: countingTool(probe) } }),
    onModelCall: (call) =>
      void probe.dispatches.push({
        kind: "model",
        sequence: call.sequence,
        durable: probe.durable.has(call.sequence),
        request: call.request
      }),
    // No memory for sessions not in use: a session is released as soon as nothing uses it (no
    // release grace), so that a use of its cell left behind shows as a session still warm.
    config: { cancelGraceMs: 1000, cleanupDeadlineMs: 2000, cacheBytes: 0 }
  })

const readAll = (journal: JournalShape, session: SessionId) =>
  Effect.gen(function*() {
    const out: Array<JournalRecord> = []
    for (;;) {
      const page = yield* journal.read(session, { after: out.length, limit: 1000 })
      if (page.length === 0) return out
      out.push(...page)
    }
  })

// ---------------------------------------------------------------------------------------------
// Invariants

const closerOf: Record<string, string> = Object.fromEntries(
  Object.entries(EffectKinds).flatMap(([started, closers]) => closers.map((c) => [c, started]))
)
const STARTED = new Set(Object.keys(EffectKinds))
const MODEL_OR_TOOL: Record<string, Dispatch["kind"]> = { model_call_started: "model", tool_call_started: "tool" }

const describeRecord = (r: JournalRecord | undefined) => (r ? `${r.sequence} ${r.kind}` : "none")

/** A record with what it closes and how, for failure messages. */
const showRecord = (r: JournalRecord) =>
  `${describeRecord(r)}${typeof r.payload?.sequence === "number" ? `→${r.payload.sequence}` : ""}${
    r.payload?.failure ? `(${r.payload.failure.code}${r.payload.failure.ambiguous ? ", ambiguous" : ""})` : ""
  }`

/**
 * Checks a journal and the dispatches of the process that wrote it. `refused`: the journal
 * refused writes at some point, so effects, activations and turns may be left open.
 * Returns the violations found (empty when all hold).
 */
const violations = (records: ReadonlyArray<JournalRecord>, dispatches: ReadonlyArray<Dispatch>, refused: boolean) => {
  const out: Array<string> = []
  records.forEach((r, i) => {
    if (r.sequence !== i + 1) out.push(`sequence not dense: record ${i} has sequence ${r.sequence}`)
  })
  const bySeq = new Map(records.map((r) => [r.sequence, r]))
  const closes = new Map<number, Array<JournalRecord>>()
  let activation: number | undefined
  for (const r of records) {
    const p = r.payload
    const opened = STARTED.has(r.kind)
    if (opened && activation === undefined) out.push(`${describeRecord(r)} started outside an open activation`)
    if (r.kind === "activation_started") activation = r.sequence
    if (closerOf[r.kind] !== undefined || ["activation_ended", "activation_failed", "turn_ended", "turn_failed"].includes(r.kind)) {
      const started = bySeq.get(p.sequence)
      const want = closerOf[r.kind] ?? (r.kind.startsWith("activation") ? "activation_started" : "turn_started")
      if (!started || started.kind !== want || started.sequence >= r.sequence) {
        out.push(`${describeRecord(r)} closes ${p.sequence}, which is ${describeRecord(started)}, not an earlier ${want}`)
      }
      closes.set(p.sequence, [...(closes.get(p.sequence) ?? []), r])
      if (r.kind.startsWith("activation")) {
        // Every effect of the activation must be closed before the activation itself.
        for (const s of records) {
          if (s.sequence > p.sequence && s.sequence < r.sequence && STARTED.has(s.kind)) {
            const done = (closes.get(s.sequence) ?? []).length > 0
            if (!done) out.push(`${describeRecord(s)} is still open when its activation closes at ${describeRecord(r)}`)
          }
        }
        activation = undefined
      }
    }
  }
  for (const r of records) {
    const isEffect = STARTED.has(r.kind)
    const isOpening = isEffect || r.kind === "turn_started" || r.kind === "activation_started"
    if (!isOpening) continue
    const n = (closes.get(r.sequence) ?? []).length
    if (n > 1) out.push(`${describeRecord(r)} is closed ${n} times`)
    if (n === 0 && !refused) out.push(`${describeRecord(r)} has no outcome although the journal never refused a write`)
  }
  const seen = new Map<string, number>()
  for (const d of dispatches) {
    const key = `${d.kind}:${d.sequence}`
    seen.set(key, (seen.get(key) ?? 0) + 1)
    const started = bySeq.get(d.sequence)
    if (!started || MODEL_OR_TOOL[started.kind] !== d.kind) {
      out.push(`${d.kind} dispatched for sequence ${d.sequence}, which is ${describeRecord(started)} in the journal`)
    }
    if (!d.durable) out.push(`${d.kind} dispatched for ${d.sequence} before its started record was durable`)
  }
  for (const [key, n] of seen) if (n > 1) out.push(`${key} dispatched ${n} times`)
  return out
}

/** Every effect, activation and turn left open by `records`, in order. */
const openItems = (records: ReadonlyArray<JournalRecord>) => {
  const closed = new Set<number>()
  for (const r of records) if (typeof r.payload?.sequence === "number" && !STARTED.has(r.kind)) closed.add(r.payload.sequence)
  return records.filter((r) =>
    (STARTED.has(r.kind) || r.kind === "turn_started" || r.kind === "activation_started") && !closed.has(r.sequence)
  )
}

/** Checks that `recovery` (the records appended by recovery) closes exactly `open`, as DESIGN §6 says. */
const recoveryViolations = (open: ReadonlyArray<JournalRecord>, recovery: ReadonlyArray<JournalRecord>) => {
  const out: Array<string> = []
  if (recovery.length !== open.length) {
    out.push(`recovery wrote ${recovery.map(describeRecord).join(", ") || "nothing"} for ${open.map(describeRecord).join(", ") || "nothing open"}`)
  }
  for (const o of open) {
    const rs = recovery.filter((r) => r.payload?.sequence === o.sequence)
    const r = rs[0]
    const f = r?.payload?.failure
    if (rs.length !== 1) {
      out.push(`recovery closed ${describeRecord(o)} ${rs.length} times`)
      continue
    }
    if (o.kind === "model_call_started") {
      if (r!.kind !== "model_call_failed" || f?.ambiguous !== true) out.push(`recovery closed ${describeRecord(o)} with ${JSON.stringify(r)}`)
    } else if (o.kind === "tool_call_started") {
      if (r!.kind !== "tool_call_failed" || r!.payload.outcome !== "unknown" || f?.ambiguous !== true || r!.payload.is_error !== true) {
        out.push(`recovery closed ${describeRecord(o)} with ${JSON.stringify(r)}`)
      }
    } else if (o.kind === "activation_started") {
      if (r!.kind !== "activation_failed" || f?.code !== "interrupted") out.push(`recovery closed ${describeRecord(o)} with ${JSON.stringify(r)}`)
    } else if (o.kind === "turn_started") {
      if (r!.kind !== "turn_failed" || f?.code !== "interrupted") out.push(`recovery closed ${describeRecord(o)} with ${JSON.stringify(r)}`)
    }
  }
  return out
}

/** Every tool call of an assistant message is answered by a tool message before the next non-tool message. */
const unansweredToolCalls = (messages: ReadonlyArray<Message>) => {
  const out: Array<string> = []
  messages.forEach((m, i) => {
    if (m.role !== "assistant" || !m.tool_calls?.length) return
    const answered = new Set<string>()
    for (let j = i + 1; j < messages.length && messages[j]!.role === "tool"; j++) answered.add(messages[j]!.tool_call_id ?? "")
    for (const c of m.tool_calls) if (!answered.has(c.id)) out.push(c.id)
  })
  return out
}

// ---------------------------------------------------------------------------------------------
// One case: a faulty process, then a restart

type Variant = "lost" | "landed" | "cancel" | "stop" | "reference"

interface CaseResult {
  readonly n: number
  readonly kinds: ReadonlyArray<ReadonlyArray<string>>
  readonly problems: ReadonlyArray<string>
}

const withDeadline = <A, E, R>(what: string, self: Effect.Effect<A, E, R>) =>
  Effect.timeoutFail(self, { duration: Duration.millis(CASE_DEADLINE_MS), onTimeout: () => new Error(`${what}: hung for ${CASE_DEADLINE_MS} ms`) })

/** Waits until `fiber` is suspended (it has done everything it can without the held append). */
const untilSuspended = <A, E>(fiber: Fiber.RuntimeFiber<A, E>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 10_000; i++) {
      const status = yield* Fiber.status(fiber)
      if (status._tag !== "Running") return
      yield* Effect.yieldNow()
    }
  })

const runCase = (variant: Variant, k: number, tools: ToolsKind = "in-process") =>
  Effect.scoped(Effect.gen(function*() {
    const dir = yield* tempDir("brain-fault-")
    const label = `${variant} k=${k}${tools === "wasm" ? " (Wasm tools)" : ""}`
    const toolBytes = tools === "wasm" ? yield* Effect.promise(() => wat(ECHO_TOOL)) : undefined
    const problems: Array<string> = []
    const probe = new Probe()
    const reached = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const fault: Fault = variant === "lost" || variant === "landed"
      ? { _tag: "fail", at: k, landed: variant === "landed" }
      : variant === "cancel" || variant === "stop"
      ? { _tag: "hold", at: k, reached, release }
      : { _tag: "none" }

    // --- The faulty process ---
    const scope = yield* Scope.make()
    // Closed by the case itself; this covers a case that fails early (closing twice is a no-op).
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    const context = yield* Layer.buildWithScope(runtime(dir, fault, probe, tools), scope)
    const sessions = Context.get(context, Sessions)
    const module = toolBytes === undefined ? undefined : (yield* Context.get(context, Agentloops).admit(toolBytes)).id
    const created = yield* sessions.create(createBody(module))
    const session = created.session_id
    probe.armed = true
    const send = yield* Effect.fork(Effect.either(sessions.send(session, { message: "go" })))
    let outcome: TurnOutcome | undefined
    if (fault._tag === "hold") {
      const got = yield* Effect.either(Effect.timeout(Deferred.await(reached), Duration.millis(CASE_DEADLINE_MS)))
      if (got._tag === "Left") problems.push(`${label}: the turn never reached append ${k}`)
      if (variant === "cancel") {
        const interrupt = yield* Effect.fork(sessions.interrupt(session))
        yield* untilSuspended(interrupt)
        yield* Deferred.succeed(release, undefined)
        const stopped = yield* withDeadline(`${label}: interrupt`, Fiber.join(interrupt))
        if (stopped.status !== "idle") problems.push(`${label}: after interrupt the session is ${stopped.status}`)
      } else {
        const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
        yield* Effect.sleep(Duration.millis(STOP_SETTLE_MS))
        yield* Deferred.succeed(release, undefined)
        yield* withDeadline(`${label}: stop`, Fiber.join(closing))
        if (probe.closedWhileHeld > 0) {
          problems.push(
            `${label}: the stop closed the turn (${probe.appends.slice(k).map((a) => a.join("+")).join(", ")}) while the activation's append ${k} (${probe.appends[k - 1]!.join("+")}) was still in flight`
          )
        }
      }
    }
    if (variant !== "stop") {
      const sent = yield* withDeadline(`${label}: send`, Fiber.join(send))
      outcome = sent._tag === "Right" ? sent.right : undefined
      if (variant === "reference") {
        if (outcome?.turn.status !== "ended") problems.push(`reference turn did not end: ${JSON.stringify(sent)}`)
      } else if (variant === "cancel") {
        const last = k === probe.appends.length && probe.appends[k - 1]!.includes("turn_ended")
        const want = last ? "ended" : "failed"
        if (outcome?.turn.status !== want || (want === "failed" && outcome.turn.failure?.code !== "cancelled")) {
          problems.push(`${label}: interrupted turn answered ${JSON.stringify(sent)}; expected ${last ? "ended (the interrupt came at its closing append)" : "failed with cancelled"}`)
        }
      } else if (sent._tag === "Right" && sent.right.turn.status !== "failed") {
        problems.push(`${label}: a turn whose journal refused a write answered ${JSON.stringify(sent.right.turn)}`)
      }
      yield* Scope.close(scope, Exit.void)
    } else {
      yield* Fiber.interrupt(send)
    }
    const kinds = [...probe.appends]

    // --- The restarted process ---
    const after = new Probe()
    const restarted = runtime(dir, { _tag: "none" }, after, tools)
    yield* withDeadline(
      `${label}: restart`,
      Effect.gen(function*() {
        const journal = yield* Journal
        const sessions = yield* Sessions
        // The restarted process has the tool's module too (admitted again: the same bytes, the same id).
        if (toolBytes !== undefined) yield* (yield* Agentloops).admit(toolBytes)
        const written = yield* readAll(journal, session)
        const refused = variant === "lost" || variant === "landed"
        for (const v of violations(written, probe.dispatches, refused)) problems.push(`${label}, before restart: ${v}`)
        const open = openItems(written)

        // First access after the restart is a read: it records the recovery, dispatches nothing.
        const summary = yield* sessions.get(session)
        const recovered = yield* readAll(journal, session)
        if (summary.status !== "idle") problems.push(`${label}: after recovery the session is ${summary.status}`)
        if (recovered.slice(0, written.length).some((r, i) => JSON.stringify(r) !== JSON.stringify(written[i]))) {
          problems.push(`${label}: recovery changed records written before the restart`)
        }
        for (const v of recoveryViolations(open, recovered.slice(written.length))) problems.push(`${label}, recovery: ${v}`)
        if (after.dispatches.length > 0) problems.push(`${label}: recovery dispatched ${JSON.stringify(after.dispatches)}`)
        if ((yield* sessions.warm) !== 0) problems.push(`${label}: the read left the session warm`)

        // The next turn works, sees what happened, and dispatches only its own effects.
        const next = yield* Effect.either(sessions.send(session, { message: "again" }))
        if (next._tag === "Left" || next.right.turn.status !== "ended") {
          problems.push(`${label}: the next turn answered ${JSON.stringify(next)}`)
        }
        const all = yield* readAll(journal, session)
        const before = new Set(violations(written, probe.dispatches, true))
        for (const v of violations(all, [...probe.dispatches, ...after.dispatches], false)) {
          if (!before.has(v)) problems.push(`${label}, after the next turn: ${v}`)
        }
        for (const d of after.dispatches) {
          if (d.sequence <= recovered.length) problems.push(`${label}: the next turn dispatched ${d.kind} ${d.sequence} from before the restart`)
        }
        const firstModel = after.dispatches.find((d) => d.kind === "model")
        const previousFailed = written.some((r) => r.kind === "turn_started") && !written.some((r) => r.kind === "turn_ended")
        if (!firstModel) problems.push(`${label}: the next turn called no model`)
        else {
          const messages = firstModel.request!.messages
          const noted = messages.some((m) => m.role === "system" && typeof m.content === "string" && m.content.includes("previous turn did not finish"))
          if (previousFailed && !noted) problems.push(`${label}: the next turn's model was not told the previous turn did not finish`)
          const orphans = unansweredToolCalls(messages)
          if (orphans.length > 0) problems.push(`${label}: the next model request has tool calls without results: ${orphans.join(", ")}`)
        }
        // Released once the turn has closed (its caller is answered first, the release follows).
        yield* untilIdle(session)
        if ((yield* sessions.warm) !== 0) problems.push(`${label}: the session stayed warm after the next turn`)
        if (problems.length > 0) {
          problems.push(
            `${label}: the journal after creation was [${written.slice(2).map(showRecord).join(", ")}], recovery wrote [${
              recovered.slice(written.length).map(showRecord).join(", ")
            }], the faulty process dispatched [${probe.dispatches.map((d) => `${d.kind} ${d.sequence}`).join(", ")}]`
          )
        }
      }).pipe(Effect.provide(restarted))
    )
    return { n: kinds.length, kinds, problems } satisfies CaseResult
  }))


/** Runs the reference turn, then `variant` at every append k of it; reports every violation at once. */
const everyStep = (variant: Exclude<Variant, "reference">, tools: ToolsKind = "in-process") =>
  Effect.gen(function*() {
    const reference = yield* runCase("reference", 0, tools)
    expect(reference.problems).toEqual([])
    const n = reference.n
    // The reference turn: turn+activation start, 2 model calls, 2 tool calls, transcript saves
    // (riding on the calls after them), close; the tools' outcomes in one append when both were
    // tried to their end (Wasm tools).
    expect(n).toBeGreaterThanOrEqual(tools === "wasm" ? 7 : 8)
    const problems: Array<string> = []
    for (let k = 1; k <= n; k++) {
      const result = yield* Effect.either(runCase(variant, k, tools))
      const at = `(append ${k} of ${n}: ${reference.kinds[k - 1]!.join("+")})`
      if (result._tag === "Left") problems.push(`${variant} k=${k} ${at}: ${String(result.left)}`)
      else problems.push(...result.right.problems.map((p) => `${p} ${at}`))
    }
    expect(problems).toEqual([])
  })

describe("a turn whose tools are Wasm tools tried on the main thread, interrupted at every append", () => {
  it.live("the reference turn tries both calls to their end: their outcomes in one append right after their starts, each run once", () =>
    Effect.gen(function*() {
      const reference = yield* runCase("reference", 0, "wasm")
      expect(reference.problems).toEqual([])
      expect(reference.kinds).toEqual([
        ["model_call_started"],
        ["model_call_ended"],
        ["tool_call_started", "tool_call_started"],
        ["tool_call_ended", "tool_call_ended"],
        ["model_call_started"],
        ["model_call_ended"],
        ["transcript_delta", "activation_ended", "turn_ended"]
      ])
    }))

  it.live("a write failure at append k (nothing written, or landed) leaves both calls closed once or pending, never run twice; restart recovers them as ambiguous and the next turn works", () =>
    Effect.gen(function*() {
      yield* everyStep("lost", "wasm")
      yield* everyStep("landed", "wasm")
    }))

  it.live("sessions.interrupt or a server stop at append k closes both calls once before the turn, runs nothing twice, and restart recovers what is left", () =>
    Effect.gen(function*() {
      yield* everyStep("cancel", "wasm")
      yield* everyStep("stop", "wasm")
    }))
})

describe("a turn interrupted at every append (file journal, fault-injecting wrapper)", () => {
  it.live("the reference turn (2 model calls, 2 tool calls) closes every effect once and dispatches each once", () =>
    Effect.gen(function*() {
      const reference = yield* runCase("reference", 0)
      expect(reference.problems).toEqual([])
      const flat = reference.kinds.flat()
      expect(flat.filter((k) => k === "model_call_started")).toHaveLength(2)
      expect(flat.filter((k) => k === "tool_call_started")).toHaveLength(2)
      // A sync send's opening (turn_started, activation_started) is staged in the journal and
      // rides on the turn's first append, its first model call's start.
      expect(reference.kinds[0]).toEqual(["model_call_started"])
      // The loop's saves ride on the calls after them (docs/abi.md, "A save that rides on a
      // call"): staged, written ahead of the dispatch's starts and the next model call's start, so
      // no append is a save on its own.
      expect(reference.kinds).toEqual([
        ["model_call_started"],
        ["model_call_ended"],
        ["tool_call_started", "tool_call_started"],
        ["tool_call_ended"],
        ["tool_call_ended"],
        ["model_call_started"],
        ["model_call_ended"],
        ["transcript_delta", "activation_ended", "turn_ended"]
      ])
      // The answer's save shares the closing append: durable with the close or not at all.
      expect(reference.kinds[reference.n - 1]).toEqual(["transcript_delta", "activation_ended", "turn_ended"])
    }))

  it.live("a write failure at append k (nothing written) leaves effects closed once or pending, never re-dispatched; restart recovers them as ambiguous and the next turn works", () =>
    everyStep("lost"))

  it.live("a write failure at append k whose records did land is recovered the same way: nothing twice, nothing re-run", () =>
    everyStep("landed"))

  it.live("sessions.interrupt at append k closes every started effect once before the turn, dispatches nothing twice, and the session stays usable", () =>
    everyStep("cancel"))

  it.live("a server stop at append k closes the turn only after its activation's effects, and restart recovers what is left", () =>
    everyStep("stop"))

  it.live("interrupt and end that race a submitted turn whose turn_started commit fails return instead of waiting forever", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("brain-fault-")
      const probe = new Probe()
      const reached = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const layer = runtime(dir, { _tag: "hold", at: 1, reached, release, thenFail: true }, probe)
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create(CREATE)
        probe.armed = true
        // A submit commits its turn_started on its own (its receipt names it); a send stages it.
        const send = yield* Effect.fork(Effect.either(sessions.submit(session_id, { message: "go" })))
        yield* Deferred.await(reached)
        // Both find the turn claimed (cell.running) while its turn_started commit is in flight.
        const interrupt = yield* Effect.fork(Effect.either(sessions.interrupt(session_id)))
        const end = yield* Effect.fork(Effect.either(sessions.end(session_id)))
        yield* untilSuspended(interrupt)
        yield* untilSuspended(end)
        yield* Deferred.succeed(release, undefined)
        const sent = yield* Fiber.join(send)
        expect(sent._tag === "Left" && sent.left.code).toBe("journal_write_failed")
        const settle = (f: typeof interrupt | typeof end) =>
          Fiber.join(f).pipe(Effect.timeout(Duration.seconds(1)), Effect.either, Effect.map((r) => r._tag === "Right" ? "returned" : "still waiting after 1 s"))
        const [i, e] = yield* Effect.all([settle(interrupt), settle(end)], { concurrency: 2 })
        expect({ interrupt: i, end: e }).toEqual({ interrupt: "returned", end: "returned" })
        yield* Fiber.interrupt(interrupt)
        yield* Fiber.interrupt(end)
      }).pipe(Effect.provide(layer))
    })))
})
