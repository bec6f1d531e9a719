/**
 * A host's answers for its calls in flight (src/layers/HostsFile.ts): an Event the host posts for a
 * call is committed before a result can settle that call, whichever request comes first, and a
 * batch of results waits for every Event in flight among its calls, an Event that starts while
 * the batch waits included. A call that posted no Event takes no lock.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { vi } from "vitest"
import { Deferred, Effect, Fiber, TestClock } from "effect"
import type { AdmittedEnvironment } from "../../src/domain/Environment.js"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import { make } from "../../src/layers/HostsFile.js"
import { Once } from "../../src/layers/Waits.js"

const SESSION = "ses_0000000000000000000000000a" as SessionId

const setup = Effect.gen(function*() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-host-calls-"))
  const hosts = yield* make({ dataDir: dir, graceMs: 100, heartbeatMs: 0, maxResultBytes: 1024 })
  const { host_id } = yield* hosts.register
  const stream = yield* hosts.connect(host_id as HostId)
  const environment = { name: "box", driver: "host", host: host_id } as AdmittedEnvironment
  /** Emits of each call, held until their gate opens; what was committed, in order. */
  const committed: Array<string> = []
  const gates = new Map<number, Deferred.Deferred<void>>()
  const call = (sequence: number) =>
    hosts.call(host_id, {
      session: SESSION,
      sequence,
      environment,
      name: "echo",
      callId: `call_${sequence}`,
      input: {},
      deadlineAtMs: 0,
      emit: (kind) =>
        Effect.gen(function*() {
          const gate = gates.get(sequence)
          if (gate) yield* Deferred.await(gate)
          committed.push(`${kind} of ${sequence}`)
          return sequence
        })
    })
  const hold = (sequence: number) => Effect.tap(Deferred.make<void>(), (gate) => void gates.set(sequence, gate))
  const name = (sequence: number) => ({ session: SESSION, sequence })
  return { hosts, host: host_id as HostId, stream, call, hold, name, committed }
})

describe("a host's Events and results for its calls", () => {
  it.scopedLive("a result that comes while the call's Event is being committed settles the call only after that Event", () =>
    Effect.gen(function*() {
      const { call, committed, hold, hosts, host, name, stream } = yield* setup
      const answered = yield* Effect.fork(call(7))
      const gate = yield* hold(7)
      const posting = yield* Effect.fork(hosts.event(host, name(7), "progress", {}))
      yield* Effect.sleep(20)
      const resulting = yield* Effect.fork(hosts.result(host, name(7), { ok: { done: true } }))
      yield* Effect.sleep(20)
      expect(answered.unsafePoll()).toBeNull()
      expect(resulting.unsafePoll()).toBeNull()
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(posting)).toBe(7)
      yield* Fiber.join(resulting)
      expect(yield* Fiber.join(answered)).toEqual({ outcome: "ok", output: { done: true } })
      expect(committed).toEqual(["progress of 7"])
      yield* stream.stop
    }))

  it.scopedLive("a batch waits for an Event that one of its calls starts while the batch waits for another's", () =>
    Effect.gen(function*() {
      const { call, committed, hold, hosts, host, name, stream } = yield* setup
      const first = yield* Effect.fork(call(1))
      const second = yield* Effect.fork(call(2))
      const gate1 = yield* hold(1)
      const gate2 = yield* hold(2)
      const posting1 = yield* Effect.fork(hosts.event(host, name(1), "progress", {}))
      yield* Effect.sleep(20)
      // The batch waits for call 1's Event; call 2 has posted none yet.
      const batch = yield* Effect.fork(hosts.results(host, [{ call: name(1), answer: { ok: 1 } }, { call: name(2), answer: { ok: 2 } }]))
      yield* Effect.sleep(20)
      const posting2 = yield* Effect.fork(hosts.event(host, name(2), "progress", {}))
      yield* Effect.sleep(20)
      yield* Deferred.succeed(gate1, undefined)
      yield* Fiber.join(posting1)
      yield* Effect.sleep(20)
      // Call 2's Event is still being committed: neither call is settled (all or none).
      expect(batch.unsafePoll()).toBeNull()
      expect(first.unsafePoll()).toBeNull()
      expect(second.unsafePoll()).toBeNull()
      yield* Deferred.succeed(gate2, undefined)
      yield* Fiber.join(posting2)
      yield* Fiber.join(batch)
      expect(yield* Fiber.join(first)).toEqual({ outcome: "ok", output: 1 })
      expect(yield* Fiber.join(second)).toEqual({ outcome: "ok", output: 2 })
      expect(committed).toEqual(["progress of 1", "progress of 2"])
      yield* stream.stop
    }))

  it.scopedLive("the same result posted twice while the call's Event is being committed settles the call once, and both posts are acknowledged", () =>
    Effect.gen(function*() {
      const { call, committed, hold, hosts, host, name, stream } = yield* setup
      const answered = yield* Effect.fork(call(8))
      const gate = yield* hold(8)
      const posting = yield* Effect.fork(hosts.event(host, name(8), "progress", {}))
      yield* Effect.sleep(20)
      // Both wait for the call's lock, each having found the call in flight.
      const first = yield* Effect.fork(hosts.result(host, name(8), { ok: { done: true } }))
      const again = yield* Effect.fork(hosts.results(host, [{ call: name(8), answer: { ok: { done: true } } }]))
      const other = yield* Effect.fork(Effect.flip(hosts.result(host, name(8), { ok: { done: false } })))
      yield* Effect.sleep(20)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(posting)
      yield* Fiber.join(first)
      yield* Fiber.join(again)
      expect((yield* Fiber.join(other)).details).toEqual({ reason: "result_conflict" })
      expect(yield* Fiber.join(answered)).toEqual({ outcome: "ok", output: { done: true } })
      expect(committed).toEqual(["progress of 8"])
      yield* stream.stop
    }))

  it.scopedLive("a caller that stops waiting takes its call out: a later result for it is refused as not in flight", () =>
    Effect.gen(function*() {
      const { call, hosts, host, name, stream } = yield* setup
      const answered = yield* Effect.fork(call(5))
      yield* Effect.sleep(10)
      yield* Fiber.interrupt(answered)
      const late = yield* Effect.flip(hosts.result(host, name(5), { ok: 1 }))
      expect(late._tag).toBe("Conflict")
      expect(late.message).toMatch(/no call .* is in flight/)
      yield* stream.stop
    }))

  it.scopedLive("a result for a call that posted no Event settles it at once", () =>
    Effect.gen(function*() {
      const { call, hosts, host, name, stream } = yield* setup
      const answered = yield* Effect.fork(call(3))
      yield* Effect.sleep(10)
      yield* hosts.result(host, name(3), { error: { message: "no" } })
      expect(yield* Fiber.join(answered)).toEqual({ outcome: "error", output: { message: "no" } })
      yield* stream.stop
    }))
})

/**
 * The calls' receipts (`EnvironmentCall.recorded`) as the test gives them: a result is acknowledged
 * only once each call it answers says its outcome record is durable.
 */
const receiptsSetup = (cleanupDeadlineMs: number, takenResults?: { readonly max: number; readonly keepMs: number }) =>
  Effect.gen(function*() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-host-receipts-"))
    const hosts = yield* make({ dataDir: dir, graceMs: 100, heartbeatMs: 0, maxResultBytes: 1024, cleanupDeadlineMs, takenResults })
    const { host_id } = yield* hosts.register
    const stream = yield* hosts.connect(host_id as HostId)
    const environment = { name: "box", driver: "host", host: host_id } as AdmittedEnvironment
    const receipts = new Map<number, Once<boolean>>()
    const call = (sequence: number) => {
      const receipt = new Once<boolean>()
      receipts.set(sequence, receipt)
      return hosts.call(host_id, {
        session: SESSION,
        sequence,
        environment,
        name: "echo",
        callId: `call_${sequence}`,
        input: {},
        deadlineAtMs: 0,
        recorded: (tell) => receipt.listen(tell)
      })
    }
    const name = (sequence: number) => ({ session: SESSION, sequence })
    return { hosts, host: host_id as HostId, stream, call, name, receipts }
  })

describe("a host's result and its calls' receipts", () => {
  it.scopedLive("a batch is acknowledged once every receipt says recorded, and its deadline's timer is cleared then", () =>
    Effect.gen(function*() {
      // 2 × the cleanup deadline + the grace: a delay no other timer of this test uses.
      const cleanupMs = 4_321
      const bound = 2 * cleanupMs + 100
      const set = vi.spyOn(globalThis, "setTimeout")
      const cleared = vi.spyOn(globalThis, "clearTimeout")
      try {
        const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(cleanupMs)
        const first = yield* Effect.fork(call(1))
        const second = yield* Effect.fork(call(2))
        yield* Effect.sleep(10)
        const batch = yield* Effect.fork(hosts.results(host, [{ call: name(1), answer: { ok: 1 } }, { call: name(2), answer: { ok: 2 } }]))
        yield* Effect.sleep(10)
        expect(yield* Fiber.join(first)).toEqual({ outcome: "ok", output: 1 })
        receipts.get(2)!.give(true)
        yield* Effect.sleep(10)
        // One receipt of two: not yet acknowledged.
        expect(batch.unsafePoll()).toBeNull()
        receipts.get(1)!.give(true)
        yield* Fiber.join(batch)
        yield* Fiber.join(second)
        const deadlines = set.mock.calls.flatMap((args, i) => (args[1] === bound ? [set.mock.results[i]!.value] : []))
        // One timer for the request (not one per call), and it no longer stands.
        expect(deadlines).toHaveLength(1)
        expect(cleared.mock.calls.map((args) => args[0])).toContain(deadlines[0])
        yield* stream.stop
      } finally {
        set.mockRestore()
        cleared.mockRestore()
      }
    }))

  it.scopedLive("a receipt that says not recorded refuses the result at once (outcome_unrecorded, naming it), whatever another still waits for", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(60_000)
      yield* Effect.fork(call(1))
      yield* Effect.fork(call(2))
      yield* Effect.sleep(10)
      const batch = yield* Effect.fork(Effect.flip(hosts.results(host, [{ call: name(1), answer: { ok: 1 } }, { call: name(2), answer: { ok: 2 } }])))
      yield* Effect.sleep(10)
      // Call 1's receipt never answers; call 2's says its outcome will not be durable.
      receipts.get(2)!.give(false)
      const refused = yield* Fiber.join(batch).pipe(Effect.timeoutFail({ duration: "2 seconds", onTimeout: () => "still waiting" as const }))
      expect(refused._tag).toBe("JournalWriteFailed")
      expect((refused as { details?: unknown }).details).toEqual({ reason: "outcome_unrecorded", ambiguous: true, index: 1 })
      yield* stream.stop
    }))

  it.scopedLive("a receipt that never answers refuses the result at the deadline (2 × the cleanup deadline + the grace), not before: outcome_unrecorded", () =>
    Effect.gen(function*() {
      // 2 × the cleanup deadline + the grace: a delay no other timer of this test uses. Its timer
      // is held here, not armed, and fired by the test: the refusal waits for it, whatever the clock says.
      const cleanupMs = 1_234
      const bound = 2 * cleanupMs + 100
      const held: Array<() => void> = []
      const original = globalThis.setTimeout as unknown as (...args: Array<unknown>) => unknown
      const set = vi.spyOn(globalThis, "setTimeout").mockImplementation(((fn: () => void, ms?: number, ...rest: Array<unknown>) => {
        if (ms !== bound) return original(fn, ms, ...rest)
        held.push(fn)
        return { held: true }
      }) as unknown as typeof setTimeout)
      try {
        const { call, host, hosts, name, stream } = yield* receiptsSetup(cleanupMs)
        yield* Effect.fork(call(4))
        yield* Effect.sleep(10)
        const result = yield* Effect.fork(Effect.flip(hosts.result(host, name(4), { ok: 4 })))
        yield* Effect.gen(function*() {
          while (held.length === 0) yield* Effect.sleep(5)
        }).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error(`no timer of ${bound} ms was armed`) }))
        expect(held).toHaveLength(1)
        // Its deadline's timer armed and not fired: still waiting for the receipt.
        yield* Effect.sleep(20)
        expect(result.unsafePoll()).toBeNull()
        held[0]!()
        const refused = yield* Fiber.join(result)
        expect(refused._tag).toBe("JournalWriteFailed")
        expect(refused.message).toMatch(new RegExp(`was not recorded within ${bound} ms`))
        expect((refused as { details?: unknown }).details).toEqual({ reason: "outcome_unrecorded", ambiguous: true })
        yield* stream.stop
      } finally {
        set.mockRestore()
      }
    }))

  it.scopedLive("a receipt known already answers the result at once, with no timer", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(60_000)
      yield* Effect.fork(call(6))
      yield* Effect.sleep(10)
      receipts.get(6)!.give(true)
      const set = vi.spyOn(globalThis, "setTimeout")
      try {
        yield* hosts.result(host, name(6), { ok: 6 })
        expect(set.mock.calls.filter((args) => args[1] === 2 * 60_000 + 100)).toHaveLength(0)
      } finally {
        set.mockRestore()
      }
      yield* stream.stop
    }))
})

/** Lets forked fibers run (no clock involved: a TestClock test's clock never moves by itself). */
const letRun = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
})

describe("a result posted again for a call whose result was taken", () => {
  it.scopedLive("the same result again, alone or in a batch, after the first was acknowledged is acknowledged again and answers the call no second time", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(60_000)
      const answered = yield* Effect.fork(call(1))
      const other = yield* Effect.fork(call(2))
      yield* Effect.sleep(10)
      receipts.get(1)!.give(true)
      yield* hosts.result(host, name(1), { ok: { n: 1 } })
      expect(yield* Fiber.join(answered)).toEqual({ outcome: "ok", output: { n: 1 } })
      // Its answer was lost: the host posts the same result again, and again.
      yield* hosts.result(host, name(1), { ok: { n: 1 } })
      yield* hosts.results(host, [{ call: name(1), answer: { ok: { n: 1 } } }])
      // With a call still in flight: that one is settled, the repeat changes nothing.
      receipts.get(2)!.give(true)
      yield* hosts.results(host, [{ call: name(1), answer: { ok: { n: 1 } } }, { call: name(2), answer: { error: "no" } }])
      expect(yield* Fiber.join(other)).toEqual({ outcome: "error", output: "no" })
      yield* hosts.results(host, [{ call: name(2), answer: { error: "no" } }, { call: name(1), answer: { ok: { n: 1 } } }])
      yield* stream.stop
    }))

  it.scopedLive("a repeat that comes while the first still waits for its receipt waits for the same receipt: acknowledged when it says recorded", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(60_000)
      yield* Effect.fork(call(3))
      yield* Effect.sleep(10)
      const first = yield* Effect.fork(hosts.result(host, name(3), { ok: 3 }))
      yield* Effect.sleep(10)
      const repeat = yield* Effect.fork(hosts.result(host, name(3), { ok: 3 }))
      yield* Effect.sleep(10)
      expect(first.unsafePoll()).toBeNull()
      expect(repeat.unsafePoll()).toBeNull()
      receipts.get(3)!.give(true)
      yield* Fiber.join(first)
      yield* Fiber.join(repeat)
      yield* stream.stop
    }))

  it.scopedLive("a repeat of a result whose outcome was not recorded is refused outcome_unrecorded, as the first was, never acknowledged", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(60_000)
      yield* Effect.fork(call(4))
      yield* Effect.sleep(10)
      const first = yield* Effect.fork(Effect.flip(hosts.result(host, name(4), { ok: 4 })))
      yield* Effect.sleep(10)
      receipts.get(4)!.give(false)
      expect((yield* Fiber.join(first))._tag).toBe("JournalWriteFailed")
      const repeat = yield* Effect.flip(hosts.result(host, name(4), { ok: 4 }))
      expect(repeat._tag).toBe("JournalWriteFailed")
      expect((repeat as { details?: unknown }).details).toEqual({ reason: "outcome_unrecorded", ambiguous: true })
      yield* stream.stop
    }))

  it.scopedLive("a different result for a taken call is 409 result_conflict, alone or in a batch (naming its index), and a batch holding one settles none of its others", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(60_000)
      yield* Effect.fork(call(5))
      const other = yield* Effect.fork(call(6))
      yield* Effect.sleep(10)
      receipts.get(5)!.give(true)
      yield* hosts.result(host, name(5), { ok: { n: 5 } })
      for (const answer of [{ ok: { n: 6 } }, { ok: { n: 5, more: true } }, { error: { n: 5 } }, { stopped: true as const }]) {
        const refused = yield* Effect.flip(hosts.result(host, name(5), answer))
        expect(refused._tag).toBe("Conflict")
        expect((refused as { details?: unknown }).details).toEqual({ reason: "result_conflict" })
      }
      const batch = yield* Effect.flip(hosts.results(host, [{ call: name(6), answer: { ok: 6 } }, { call: name(5), answer: { ok: "else" } }]))
      expect(batch._tag).toBe("Conflict")
      expect((batch as { details?: unknown }).details).toEqual({ reason: "result_conflict", index: 1 })
      // Call 6 is still in flight: the refused batch took nothing.
      yield* Effect.sleep(10)
      expect(other.unsafePoll()).toBeNull()
      receipts.get(6)!.give(true)
      yield* hosts.result(host, name(6), { ok: 6 })
      expect(yield* Fiber.join(other)).toEqual({ outcome: "ok", output: 6 })
      yield* stream.stop
    }))

  it.scopedLive("a result for a call that ended without one (its caller stopped waiting, its stream closed) is still 409 not_in_flight", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, stream } = yield* receiptsSetup(60_000)
      const abandoned = yield* Effect.fork(call(7))
      yield* Effect.fork(call(8))
      yield* Effect.sleep(10)
      yield* Fiber.interrupt(abandoned)
      yield* stream.stop
      for (const sequence of [7, 8]) {
        const refused = yield* Effect.flip(hosts.result(host, name(sequence), { ok: sequence }))
        expect(refused._tag).toBe("Conflict")
        expect((refused as { details?: unknown }).details).toEqual({ reason: "not_in_flight" })
      }
    }))

  it.scopedLive("taken results are remembered up to the bound's count, the oldest forgotten first: a repeat for a forgotten one is 409 not_in_flight", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(60_000, { max: 2, keepMs: 600_000 })
      for (const sequence of [1, 2, 3]) {
        yield* Effect.fork(call(sequence))
        yield* Effect.sleep(10)
        receipts.get(sequence)!.give(true)
        yield* hosts.result(host, name(sequence), { ok: sequence })
      }
      const forgotten = yield* Effect.flip(hosts.result(host, name(1), { ok: 1 }))
      expect((forgotten as { details?: unknown }).details).toEqual({ reason: "not_in_flight" })
      yield* hosts.result(host, name(2), { ok: 2 })
      yield* hosts.result(host, name(3), { ok: 3 })
      yield* stream.stop
    }))

  it.scoped("a taken result is remembered for the bound's age and no longer: a repeat after it is 409 not_in_flight", () =>
    Effect.gen(function*() {
      const { call, host, hosts, name, receipts, stream } = yield* receiptsSetup(0, { max: 16, keepMs: 60_000 })
      const answered = yield* Effect.fork(call(9))
      // The call is sent once its fiber has run.
      yield* letRun
      receipts.get(9)!.give(true)
      yield* hosts.result(host, name(9), { ok: 9 })
      expect(yield* Fiber.join(answered)).toEqual({ outcome: "ok", output: 9 })
      yield* TestClock.adjust("59 seconds")
      yield* hosts.result(host, name(9), { ok: 9 })
      yield* TestClock.adjust("1 second")
      const forgotten = yield* Effect.flip(hosts.result(host, name(9), { ok: 9 }))
      expect((forgotten as { details?: unknown }).details).toEqual({ reason: "not_in_flight" })
      yield* stream.stop
    }))
})
