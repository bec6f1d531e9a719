/**
 * A loop's input carries the Events since the previous activation only as far as they fit in
 * BRAIN_MAX_WASM_IO_BYTES after the rest of the input (docs/abi.md, "The input's Events"): a
 * previous activation that emitted more than the next input can carry never fails the next turn.
 * The loop gets the first Events, in order, and reads the rest with the `events` host call from the
 * last one it got — a single Event no input could carry included.
 *
 * The loop (WAT, below) lists the sequences of its input's Events (`got`), asks the `events` host
 * call for those after the last one (`rest`), returns both, and then emits `count` Events of
 * `size` bytes of payload each, for its next turn to receive.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"
import { data, guest, wat } from "../support/wat.js"

const IO_BYTES = 128 * 1024

const SID = data(100, '{"session_id":"')
const SEQ = data(130, '"sequence":')
const EVENTS = data(150, '"events":[')
const RUNTIME = data(170, '],"runtime":')
const GOT = data(190, '{"ok":{"got":[')
const REST = data(210, '],"rest":[')
const END = data(230, "]}}")
const AFTER = data(240, '{"after":')
const LIMIT = data(250, ',"limit":1000}')
const EVENTS_OP = data(270, "events")
const EMIT_OP = data(280, "emit")
const EMIT_HEAD = data(290, '{"kind":"big","payload":"')
const EMIT_TAIL = data(320, '"}')

/** The loop: reports what it got and what the `events` host call reads on, then emits `count` Events of `size` bytes of payload. */
const reportingLoop = (count: number, size: number) =>
  guest(`
  ${[SID, SEQ, EVENTS, RUNTIME, GOT, REST, END, AFTER, LIMIT, EVENTS_OP, EMIT_OP, EMIT_HEAD, EMIT_TAIL].map((d) => d.segment).join("\n  ")}
  (global $last (mut i32) (i32.const 0))
  ;; 1 when the n bytes at a are those at b
  (func $match (param $a i32) (param $b i32) (param $n i32) (result i32)
    (local $i i32)
    (block $no
      (loop $l
        (if (i32.ge_u (local.get $i) (local.get $n)) (then (return (i32.const 1))))
        (br_if $no (i32.ne (i32.load8_u (i32.add (local.get $a) (local.get $i))) (i32.load8_u (i32.add (local.get $b) (local.get $i)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (i32.const 0))
  ;; the address of the last occurrence of the pl bytes at p in the hl bytes at h, or -1
  (func $lastIndex (param $h i32) (param $hl i32) (param $p i32) (param $pl i32) (result i32)
    (local $i i32)
    (if (i32.lt_u (local.get $hl) (local.get $pl)) (then (return (i32.const -1))))
    (local.set $i (i32.add (local.get $h) (i32.sub (local.get $hl) (local.get $pl))))
    (loop $l
      (if (call $match (local.get $i) (local.get $p) (local.get $pl)) (then (return (local.get $i))))
      (if (i32.gt_u (local.get $i) (local.get $h)) (then (local.set $i (i32.sub (local.get $i) (i32.const 1))) (br $l))))
    (i32.const -1))
  ;; writes n in decimal at out; returns the end of what it wrote
  (func $itoa (param $n i32) (param $out i32) (result i32)
    (local $len i32) (local $m i32) (local $i i32)
    (local.set $m (local.get $n))
    (local.set $len (i32.const 1))
    (block $b
      (loop $l
        (local.set $m (i32.div_u (local.get $m) (i32.const 10)))
        (br_if $b (i32.eqz (local.get $m)))
        (local.set $len (i32.add (local.get $len) (i32.const 1)))
        (br $l)))
    (local.set $i (local.get $len))
    (loop $w
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8 (i32.add (local.get $out) (local.get $i)) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $w (i32.gt_u (local.get $i) (i32.const 0))))
    (i32.add (local.get $out) (local.get $len)))
  ;; writes the sequences of the Events in [p, end) at out as "n,n,…"; returns the end of what it
  ;; wrote, the last sequence in $last (an Event starts with {"session_id":", its sequence follows)
  (func $seqs (param $p i32) (param $end i32) (param $out i32) (result i32)
    (local $i i32) (local $n i32) (local $c i32) (local $first i32)
    (local.set $first (i32.const 1))
    (local.set $i (local.get $p))
    (block $done
      (loop $scan
        (br_if $done (i32.gt_u (i32.add (local.get $i) (i32.const ${SID.len})) (local.get $end)))
        (if (call $match (local.get $i) (i32.const ${SID.ptr}) (i32.const ${SID.len}))
          (then
            (local.set $i (i32.add (local.get $i) (i32.const ${SID.len})))
            (block $found
              (loop $seek
                (br_if $found (call $match (local.get $i) (i32.const ${SEQ.ptr}) (i32.const ${SEQ.len})))
                (local.set $i (i32.add (local.get $i) (i32.const 1)))
                (br $seek)))
            (local.set $i (i32.add (local.get $i) (i32.const ${SEQ.len})))
            (if (i32.eqz (local.get $first))
              (then (i32.store8 (local.get $out) (i32.const 44)) (local.set $out (i32.add (local.get $out) (i32.const 1)))))
            (local.set $first (i32.const 0))
            (local.set $n (i32.const 0))
            (block $nd
              (loop $digits
                (local.set $c (i32.load8_u (local.get $i)))
                (br_if $nd (i32.gt_u (i32.sub (local.get $c) (i32.const 48)) (i32.const 9)))
                (i32.store8 (local.get $out) (local.get $c))
                (local.set $out (i32.add (local.get $out) (i32.const 1)))
                (local.set $n (i32.add (i32.mul (local.get $n) (i32.const 10)) (i32.sub (local.get $c) (i32.const 48))))
                (local.set $i (i32.add (local.get $i) (i32.const 1)))
                (br $digits)))
            (global.set $last (local.get $n)))
          (else (local.set $i (i32.add (local.get $i) (i32.const 1)))))
        (br $scan)))
    (local.get $out))
  (func (export "brain_run") (param $ip i32) (param $il i32) (result i64)
    (local $es i32) (local $ee i32) (local $out i32) (local $o i32) (local $req i32) (local $r i32)
    (local $ans i64) (local $ap i32) (local $al i32) (local $e i32) (local $k i32)
    (local.set $es (i32.add (call $lastIndex (local.get $ip) (local.get $il) (i32.const ${EVENTS.ptr}) (i32.const ${EVENTS.len})) (i32.const ${EVENTS.len})))
    (local.set $ee (call $lastIndex (local.get $ip) (local.get $il) (i32.const ${RUNTIME.ptr}) (i32.const ${RUNTIME.len})))
    (local.set $out (call $alloc (i32.const 65536)))
    (memory.copy (local.get $out) (i32.const ${GOT.ptr}) (i32.const ${GOT.len}))
    (local.set $o (call $seqs (local.get $es) (local.get $ee) (i32.add (local.get $out) (i32.const ${GOT.len}))))
    ;; the rest: the Events after the last one got
    (local.set $req (call $alloc (i32.const 64)))
    (memory.copy (local.get $req) (i32.const ${AFTER.ptr}) (i32.const ${AFTER.len}))
    (local.set $r (call $itoa (global.get $last) (i32.add (local.get $req) (i32.const ${AFTER.len}))))
    (memory.copy (local.get $r) (i32.const ${LIMIT.ptr}) (i32.const ${LIMIT.len}))
    (local.set $r (i32.add (local.get $r) (i32.const ${LIMIT.len})))
    (local.set $ans (call $call (i32.const ${EVENTS_OP.ptr}) (i32.const ${EVENTS_OP.len}) (local.get $req) (i32.sub (local.get $r) (local.get $req))))
    (local.set $ap (i32.wrap_i64 (i64.shr_u (local.get $ans) (i64.const 32))))
    (local.set $al (i32.wrap_i64 (local.get $ans)))
    (memory.copy (local.get $o) (i32.const ${REST.ptr}) (i32.const ${REST.len}))
    (local.set $o (call $seqs (local.get $ap) (i32.add (local.get $ap) (local.get $al)) (i32.add (local.get $o) (i32.const ${REST.len}))))
    (memory.copy (local.get $o) (i32.const ${END.ptr}) (i32.const ${END.len}))
    (local.set $o (i32.add (local.get $o) (i32.const ${END.len})))
    ;; then the Events its next turn receives
    (local.set $e (call $alloc (i32.const ${size + EMIT_HEAD.len + EMIT_TAIL.len})))
    (memory.copy (local.get $e) (i32.const ${EMIT_HEAD.ptr}) (i32.const ${EMIT_HEAD.len}))
    (memory.fill (i32.add (local.get $e) (i32.const ${EMIT_HEAD.len})) (i32.const 120) (i32.const ${size}))
    (memory.copy (i32.add (local.get $e) (i32.const ${EMIT_HEAD.len + size})) (i32.const ${EMIT_TAIL.ptr}) (i32.const ${EMIT_TAIL.len}))
    (block $emitted
      (loop $emit
        (br_if $emitted (i32.ge_u (local.get $k) (i32.const ${count})))
        (drop (call $call (i32.const ${EMIT_OP.ptr}) (i32.const ${EMIT_OP.len}) (local.get $e) (i32.const ${size + EMIT_HEAD.len + EMIT_TAIL.len})))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $emit)))
    (call $out (local.get $out) (i32.sub (local.get $o) (local.get $out))))
`)

type Event = { readonly sequence: number; readonly kind: string; readonly data?: unknown }

describe("a loop's input Events past what its input can carry", () => {
  const server = sharedServer({ env: { BRAIN_MAX_WASM_IO_BYTES: String(IO_BYTES), BRAIN_MAX_EMITTED_BYTES: "0" } })

  /** A session of the loop, and the turns it ran: each turn's result, and the session's Events. */
  const session = async (loop: string, opening: Record<string, unknown> = {}) => {
    const admitted = await request(server().baseUrl, "/v1/agentloops", { raw: await wat(loop), headers: { "content-type": "application/wasm" } })
    expect(admitted.status, admitted.text).toBe(201)
    const created = await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" }, ...opening } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const turn = async (message: string) => {
      const sent = await request(server().baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message } } })
      expect(sent.status, sent.text).toBe(200)
      return sent.body.turn as { status: string; result?: { got: Array<number>; rest: Array<number> }; failure?: unknown }
    }
    const events = async (): Promise<ReadonlyArray<Event>> => {
      const page = await request(server().baseUrl, `/v1/sessions/${id}/events?after=0&limit=1000`)
      expect(page.status).toBe(200)
      return page.body.events
    }
    return { turn, events }
  }

  /** The sequences of the Events from the `n`th activation_started (0: the first) through the next one. */
  const range = (events: ReadonlyArray<Event>, n: number) => {
    const starts = events.filter((e) => e.kind === "activation_started").map((e) => e.sequence)
    return events.filter((e) => e.sequence >= starts[n]! && e.sequence <= starts[n + 1]!).map((e) => e.sequence)
  }

  it("a previous activation's Events above the room do not fail the next turn: the loop gets the first of them in order, and reads the rest with the events host call from the last one it got", async () => {
    // Eight Events of 20,000 bytes: more than a 128 KiB input can carry with the rest of it.
    const s = await session(reportingLoop(8, 20_000))
    const first = await s.turn("one")
    expect(first.status, JSON.stringify(first.failure)).toBe("ended")
    const second = await s.turn("two")
    expect(second.status, JSON.stringify(second.failure)).toBe("ended")
    const third = await s.turn("three")
    expect(third.status, JSON.stringify(third.failure)).toBe("ended")

    const events = await s.events()
    for (const [turn, n] of [[second, 0], [third, 1]] as const) {
      const whole = range(events, n)
      const { got, rest } = turn.result!
      // Cut: some, not all; a prefix in order, and the rest follows it exactly.
      expect(got.length).toBeGreaterThan(1)
      expect(got.length).toBeLessThan(whole.length)
      expect(got).toEqual(whole.slice(0, got.length))
      expect([...got, ...rest]).toEqual(whole)
      // The loop can tell: its last Event is not its own activation_started.
      expect(got[got.length - 1]).not.toBe(whole[whole.length - 1])
      // As many as fit: what it got is within the bound, and one more would not have been.
      const bytes = (seqs: ReadonlyArray<number>) => seqs.reduce((sum, q) => sum + JSON.stringify(events.find((e) => e.sequence === q)).length, 0)
      expect(bytes(got)).toBeLessThanOrEqual(IO_BYTES)
      // (the rest of this input — the configuration, the turn's input, the runtime — is well under 4 KiB)
      expect(bytes(whole.slice(0, got.length + 1))).toBeGreaterThan(IO_BYTES - 4096)
    }
  })

  it("a transcript that fills most of the room leaves the Events less of it: the turn still runs, with fewer of them", async () => {
    const big = { role: "user", content: "t".repeat(60_000) }
    const s = await session(reportingLoop(8, 20_000), { transcript: [big] })
    expect((await s.turn("one")).status).toBe("ended")
    const second = await s.turn("two")
    expect(second.status, JSON.stringify(second.failure)).toBe("ended")
    const events = await s.events()
    const whole = range(events, 0)
    const { got, rest } = second.result!
    expect([...got, ...rest]).toEqual(whole)
    // 60 KB of the 128 KiB go to the transcript: three Events of 20 KB fit beside it, not four.
    const bigs = got.filter((q) => events.find((e) => e.sequence === q)!.kind === "big")
    expect(bigs.length).toBe(3)
  })

  it("an Event larger than any input is left out of the next input with every Event after it, and the events host call still reads it", async () => {
    // One Event whose payload alone nearly fills the bound: its emit request fits, no input can carry it.
    const size = IO_BYTES - 40
    const s = await session(reportingLoop(1, size))
    expect((await s.turn("one")).status).toBe("ended")
    const second = await s.turn("two")
    expect(second.status, JSON.stringify(second.failure)).toBe("ended")
    const events = await s.events()
    const whole = range(events, 0)
    const big = events.find((e) => e.kind === "big")!
    expect(JSON.stringify(big).length).toBeGreaterThan(IO_BYTES)
    const { got, rest } = second.result!
    // It got the previous activation_started, and nothing from the big Event on.
    expect(got).toEqual([whole[0]])
    expect(rest[0]).toBe(big.sequence)
    expect([...got, ...rest]).toEqual(whole)
    // And every later turn runs too.
    const third = await s.turn("three")
    expect(third.status, JSON.stringify(third.failure)).toBe("ended")
    expect([...third.result!.got, ...third.result!.rest]).toEqual(range(await s.events(), 1))
  })
})
