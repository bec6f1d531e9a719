/**
 * Runs a TypeScript Agentloop behind the WebAssembly host, for the Agentloop contract suite: a
 * relay guest (WAT, below) asks the test-only host service `__next` what to do, performs the host
 * call it is told with `brain.call` — the real ABI path: guest memory, the worker's blocking call,
 * the host bridge's decoding, the journaled service, the answer's encoding — and hands the answer
 * back with its next `__next`. The TypeScript loop runs beside it and sees each answer decoded as
 * the in-process Host would give it. So every host call of every contract test crosses the ABI.
 *
 * `__next`'s answer is `op\nrequest` (the next call), or `done\n<output JSON>`: a private protocol
 * between this relay and its guest, never offered to real guests.
 */
import { Deferred, Effect, Either, Fiber, Option, Queue } from "effect"
import { failure, type Failure } from "../../src/domain/Failure.js"
import { AgentloopFailed, type AgentloopShape, HostCallFailed, type Host } from "../../src/services/Agentloop.js"
import { AgentloopFailed as Failed } from "../../src/services/Agentloop.js"
import type { AdmittedModule } from "../../src/services/WasmHost.js"
import { activate, type ActivationLimits, jsonBytes } from "../../src/layers/wasm/Activation.js"
import { loopServices } from "../../src/layers/wasm/HostBridge.js"
import type { Pool } from "../../src/layers/wasm/Pool.js"
import { data, guest } from "./wat.js"

const NEXT = data(0, "__next")
const DONE = data(16, "done")

/** The relay guest: `__next` with the input, then perform what it says until `done`. */
export const relayGuest = guest(`
  ${NEXT.segment}
  ${DONE.segment}
  (func (export "brain_run") (param $ip i32) (param $il i32) (result i64)
    (local $ans i64) (local $p i32) (local $l i32) (local $i i32)
    (loop $relay
      (local.set $ans (call $call (i32.const ${NEXT.ptr}) (i32.const ${NEXT.len}) (local.get $ip) (local.get $il)))
      (local.set $p (i32.wrap_i64 (i64.shr_u (local.get $ans) (i64.const 32))))
      (local.set $l (i32.wrap_i64 (local.get $ans)))
      (local.set $i (i32.const 0))
      (block $found
        (loop $scan
          (br_if $found (i32.ge_u (local.get $i) (local.get $l)))
          (br_if $found (i32.eq (i32.load8_u (i32.add (local.get $p) (local.get $i))) (i32.const 10)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $scan)))
      ;; "done": the rest is the output
      (if (i32.and (i32.eq (local.get $i) (i32.const 4)) (i32.eq (i32.load (local.get $p)) (i32.load (i32.const ${DONE.ptr}))))
        (then (return (call $out (i32.add (local.get $p) (i32.const 5)) (i32.sub (local.get $l) (i32.const 5))))))
      (local.set $ans (call $call (local.get $p) (local.get $i) (i32.add (local.get $p) (i32.add (local.get $i) (i32.const 1))) (i32.sub (local.get $l) (i32.add (local.get $i) (i32.const 1)))))
      (local.set $ip (i32.wrap_i64 (i64.shr_u (local.get $ans) (i64.const 32))))
      (local.set $il (i32.wrap_i64 (local.get $ans)))
      (br $relay))
    (unreachable))
`)

type Pending = { readonly op: string; readonly request: unknown; readonly answer: Deferred.Deferred<string> }

const decode = <A>(answer: string, value: (ok: any) => A): Effect.Effect<A, HostCallFailed> => {
  const parsed = JSON.parse(answer) as { ok?: unknown; error?: Failure }
  if ("error" in parsed && parsed.error) {
    const e = parsed.error
    return Effect.fail(new HostCallFailed({ failure: failure(e.code, e.message, { retryable: e.retryable, ambiguous: e.ambiguous }) }))
  }
  return Effect.succeed(value(parsed.ok))
}

/** `loop` run behind the WebAssembly host: each of its host calls relayed through the guest. */
export const relayed = (loop: AgentloopShape, module: AdmittedModule, pool: Pool, limits: ActivationLimits): AgentloopShape => ({
  // Which Events the input carries is the loop's choice, made before the activation: the relay keeps it.
  ...(loop.eventsFromEnd === true ? { eventsFromEnd: true } : {}),
  ...(loop.eventKinds === undefined ? {} : { eventKinds: loop.eventKinds }),
  activate: (input, host) =>
    Effect.gen(function*() {
      const calls = yield* Queue.unbounded<Pending>()
      const ask = <A>(op: string, request: unknown, value: (ok: any) => A) =>
        Effect.gen(function*() {
          const answer = yield* Deferred.make<string>()
          yield* Queue.offer(calls, { op, request, answer })
          return yield* Effect.flatMap(Deferred.await(answer), (text) => decode(text, value))
        })
      const relayHost: Host = {
        refusal: () => undefined,
        // A save riding on the call goes as the request's `transcript` (docs/abi.md, "A save that rides on a call").
        model: (r, save) => ask("model", save === undefined ? r : { ...r, transcript: { messages: save } }, (ok) => ok),
        dispatch: (c, save) => ask("dispatch", save === undefined ? { calls: c } : { calls: c, transcript: { messages: save } }, (ok) => ok),
        emit: (kind, payload) => ask("emit", { kind, payload }, (ok) => ok.sequence),
        telemetry: (d) => Effect.orDie(ask("telemetry", d, () => undefined)),
        kvRead: (key) => ask("kv_read", { key }, (ok) => (ok.found ? Option.some(ok.value) : Option.none())),
        kvPut: (key, value) => ask("kv_put", { key, value }, () => undefined),
        kvDelete: (key) => ask("kv_delete", { key }, () => undefined),
        setTranscript: (messages) => ask("set_transcript", { messages }, () => undefined),
        setTranscriptAtEnd: (messages) => ask("set_transcript", { messages }, () => undefined),
        events: (o) => ask("events", o, (ok) => ok)
      }
      let running: Fiber.RuntimeFiber<unknown, AgentloopFailed | HostCallFailed> | undefined
      let waiting: Pending | undefined
      const real = loopServices(host, input.transcript)
      const next = (payload: string): Effect.Effect<string> =>
        Effect.gen(function*() {
          if (!running) running = yield* Effect.fork(loop.activate(input, relayHost))
          else if (waiting) yield* Deferred.succeed(waiting.answer, payload)
          waiting = undefined
          const step = yield* Effect.raceFirst(
            Effect.map(Queue.take(calls), Either.left),
            Effect.map(Fiber.await(running), Either.right)
          )
          if (Either.isLeft(step)) {
            waiting = step.left
            return `${step.left.op}\n${JSON.stringify(step.left.request)}`
          }
          const exit = step.right
          if (exit._tag === "Success") return `done\n${JSON.stringify({ ok: exit.value ?? null })}`
          const err = exit.cause._tag === "Fail" ? exit.cause.error : undefined
          const f = err?.failure ?? failure("agentloop_failed", "the loop crashed")
          return `done\n${JSON.stringify({ error: { code: f.code, message: f.message, retryable: f.retryable, ambiguous: f.ambiguous } })}`
        })
      const output = yield* activate(
        pool,
        {
          moduleId: module.hash,
          module: module.module,
          memory: module.memory,
          entry: "brain_run",
          input: jsonBytes(input),
          perform: (op, request) => (op === "__next" ? next(request) : real(op, request))
        },
        limits
      ).pipe(
        Effect.mapError((f) => new Failed({ failure: failure("agentloop_failed", f.message) })),
        Effect.ensuring(Effect.suspend(() => (running ? Fiber.interrupt(running) : Effect.void)))
      )
      const parsed = JSON.parse(output) as { ok?: unknown; error?: Failure }
      if (parsed.error) {
        const e = parsed.error
        return yield* Effect.fail(new AgentloopFailed({ failure: failure(e.code, e.message, { retryable: e.retryable, ambiguous: e.ambiguous }) }))
      }
      return parsed.ok
    })
})
