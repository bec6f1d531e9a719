/**
 * The Promise client against a real server process (no token): every session method, the Events
 * iterator (pages then live, deltas as their own kind), typed errors, retries of uncertain
 * requests under the same Idempotency-Key, and `close`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Brain, BrainClosed, BrainError, type Event, type EventOrDelta } from "../../src/sdk/index.js"
import type { ServerProcess } from "../support/server.js"
import { history, jsonAnswer, RecordingFetch, takeUntil, serverAndClient } from "./support.js"

const scripted = { model: { provider: "scripted" as const } }
const isTurnEnd = (e: Event) => e.kind === "turn_ended" || e.kind === "turn_failed"

describe("the Promise client", () => {
  let server: ServerProcess
  let brain: Brain
  serverAndClient((started) => ({ server, brain } = started))

  it("create answers with a handle on the stored session; get and list read the same session back", async () => {
    const session = await brain.sessions.create(scripted)
    expect(session.id).toMatch(/^ses_/)
    expect(session.summary).toMatchObject({ session_id: session.id, status: "idle" })
    const again = await brain.sessions.get(session.id)
    expect(again.summary).toEqual(session.summary)
    const seen: Array<string> = []
    for (let after: string | undefined;;) {
      const page = await brain.sessions.list({ limit: 2, ...(after ? { after } : {}) })
      seen.push(...page.sessions.map((s) => s.session_id))
      if (page.next_cursor === null) break
      after = page.next_cursor
    }
    expect(seen).toContain(session.id)
  })

  it("send runs one turn and resolves with its outcome; transcript reads the canonical messages it saved", async () => {
    const session = await brain.sessions.create(scripted)
    const outcome = await session.send("hello")
    expect(outcome.turn).toMatchObject({ status: "ended", result: { text: "hello" } })
    expect(session.summary.last_sequence).toBe(outcome.last_sequence)
    const transcript = await session.transcript()
    expect(transcript.messages).toEqual([{ role: "user", content: "hello" }, { role: "assistant", content: "hello" }])
    expect(transcript.through_sequence).toBeLessThanOrEqual(outcome.last_sequence)
  })

  it("submit answers with the receipt of the committed turn_started, and the Events from that receipt show the turn to its end", async () => {
    const session = await brain.sessions.create(scripted)
    const receipt = await session.submit({ message: "in the background" })
    expect(receipt.session_id).toBe(session.id)
    const events = await takeUntil(session.events(receipt), isTurnEnd)
    expect(events[0]).toMatchObject({ sequence: receipt.sequence, kind: "turn_started", data: { input: { message: "in the background" }, mode: "submit" } })
    expect(events.at(-1)!.kind).toBe("turn_ended")
    expect((await brain.sessions.get(session.id)).summary.status).toBe("idle")
  })

  it("events(receipt) reads from the receipt's sequence, its turn_started first (the seed's \"read Events from the receipt's sequence\"), as events(receipt.sequence - 1) does; a number is an exclusive cursor; another session's receipt is refused", async () => {
    const session = await brain.sessions.create(scripted)
    const receipt = await session.submit("from the receipt")
    const fromReceipt = await takeUntil(session.events(receipt), isTurnEnd)
    expect(fromReceipt[0]).toMatchObject({ sequence: receipt.sequence, kind: "turn_started", data: { mode: "submit" } })
    expect(fromReceipt.at(-1)!.kind).toBe("turn_ended")
    expect(await takeUntil(session.events(receipt.sequence - 1), isTurnEnd)).toEqual(fromReceipt)
    const afterIt = await takeUntil(session.events(receipt.sequence), isTurnEnd)
    expect(afterIt[0]!.sequence).toBeGreaterThan(receipt.sequence)
    expect(afterIt).toEqual(fromReceipt.slice(1))
    const other = await brain.sessions.create(scripted)
    const refused = await takeUntil(other.events(receipt), isTurnEnd).then(() => undefined, (e: unknown) => e)
    expect(refused).toBeInstanceOf(BrainError)
    expect(refused).toMatchObject({ code: "invalid_request", status: 400 })
  })

  it("events yields pages then the live stream, each sequence once and in order, with data and origin identical to the pages'", async () => {
    const recording = new RecordingFetch()
    const reader = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await brain.sessions.create({ ...scripted, agentloop: "emitter" })
    const live = (await reader.sessions.get(session.id)).events(0)
    // The creation's Events come from the pages; once they are read, the next read opens the stream.
    const fromPages: Array<Event> = []
    while (fromPages.length < session.summary.last_sequence) fromPages.push((await live.next()).value as Event)
    expect(recording.streamsOpened).toBe(0)
    const next = live.next()
    await recording.streams(1)
    // Everything from here on reaches the reader through the stream: the pages are behind it.
    await session.send("3")
    const fromStream = [(await next).value as Event, ...await takeUntil(live, isTurnEnd)]
    await live.return()
    await reader.close()

    const read = [...fromPages, ...fromStream]
    expect(read).toEqual(await history(brain, session.id))
    const sequences = read.map((e) => e.sequence)
    expect(sequences).toEqual([...new Set(sequences)].sort((a, b) => a - b))
    const ticks = fromStream.filter((e) => e.kind === "tick")
    expect(ticks.map((e) => e.data)).toEqual([{ i: 0, of: 3 }, { i: 1, of: 3 }, { i: 2, of: 3 }])
    const activation = fromStream.find((e) => e.kind === "activation_started")!
    for (const tick of ticks) expect(tick.origin).toEqual({ kind: "agentloop", sequence: activation.sequence })
  })

  it("with deltas: true, live model deltas come as {type: \"delta\"} items between the call's start and end, and join to the committed text", async () => {
    const text = "one two three four five"
    const recording = new RecordingFetch()
    const reader = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await reader.sessions.create({ model: { provider: "scripted", replies: [{ text, delay_ms: 300 }] } })
    const live = session.events(session.summary.last_sequence, { deltas: true })
    const first = live.next()
    await recording.streams(1)
    await session.submit("go")
    const items: Array<EventOrDelta> = [(await first).value as EventOrDelta]
    items.push(...await takeUntil(live, (i) => i.type === "event" && isTurnEnd(i.event)))
    await reader.close()

    const kinds = items.map((i) => (i.type === "event" ? i.event.kind : "delta"))
    const started = kinds.indexOf("model_call_started")
    const ended = kinds.indexOf("model_call_ended")
    const deltas = items.flatMap((i) => (i.type === "delta" ? [i.delta] : []))
    expect(deltas.length).toBe(text.split(" ").length)
    for (const [at, kind] of kinds.entries()) if (kind === "delta") expect(at > started && at < ended).toBe(true)
    const call = (items[started] as { event: Event }).event
    for (const d of deltas) expect(d).toMatchObject({ session_id: session.id, model_call: call.sequence, type: "text" })
    expect(deltas.map((d) => (d.type === "text" ? d.text : "")).join("")).toBe(text)
    expect((items[ended] as { event: Event }).event.data).toMatchObject({ result: { text } })
  })

  it("interrupt cancels the turn in flight and keeps the session open for another turn", async () => {
    const session = await brain.sessions.create({ model: { provider: "scripted", replies: [{ text: "slow reply", delay_ms: 5_000 }, { text: "next" }] } })
    const live = session.events(session.summary.last_sequence)
    const receipt = await session.submit("go")
    await takeUntil(live, (e) => e.kind === "model_call_started")
    const summary = await session.interrupt()
    expect(summary.session_id).toBe(session.id)
    const rest = await takeUntil(live, isTurnEnd)
    await live.return()
    expect(rest.at(-1)).toMatchObject({ kind: "turn_failed", data: { sequence: receipt.sequence, failure: { code: "cancelled" } } })
    const next = await session.send("again")
    expect(next.turn).toMatchObject({ status: "ended", result: { text: "next" } })
  })

  it("end refuses new messages with a typed 409 session_ended, keeps the history readable, and delete then removes the session (404)", async () => {
    const session = await brain.sessions.create(scripted)
    await session.send("before the end")
    const ended = await session.end()
    expect(ended.status).toBe("ended")
    const refused = await session.send("after the end").catch((e) => e)
    expect(refused).toBeInstanceOf(BrainError)
    expect(refused).toMatchObject({ code: "session_ended", status: 409 })
    const events = await takeUntil(session.events(0), () => false) // ends by itself after session_ended
    expect(events.at(-1)!.kind).toBe("session_ended")
    expect((await session.transcript()).messages).toHaveLength(2)
    await session.delete()
    const gone = await brain.sessions.get(session.id).catch((e) => e)
    expect(gone).toMatchObject({ _tag: "BrainError", code: "not_found", status: 404, retryable: false })
  })

  it("refusals are BrainErrors carrying the server's code, status, retryable and message", async () => {
    const malformed = await brain.sessions.get("not-a-session-id").catch((e) => e)
    expect(malformed).toBeInstanceOf(BrainError)
    expect(malformed).toMatchObject({ code: "invalid_request", status: 400, retryable: false })
    expect(malformed.message.length).toBeGreaterThan(0)
    const badBody = await brain.sessions.create({ model: { provider: "scripted" }, unknown_field: 1 } as never).catch((e) => e)
    expect(badBody).toMatchObject({ _tag: "BrainError", code: "invalid_request", status: 400 })
    const session = await brain.sessions.create(scripted)
    const pastTheEnd = await takeUntil(session.events(1_000_000), () => true).catch((e) => e)
    expect(pastTheEnd).toMatchObject({ code: "invalid_request", status: 400, details: { last_sequence: session.summary.last_sequence } })
  })

  it("a request the contract refuses is not sent, and rejects as the server answers it: invalid_request with details listing each issue at the server's path", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create(scripted)
    const sentBefore = recording.sent.length
    const pathsOf = (e: { details?: ReadonlyArray<{ path: ReadonlyArray<unknown> }> }) => e.details?.map((i) => i.path)
    const unknownField = await client.sessions.create({ ...scripted, bogus: 1 } as never).catch((e) => e)
    expect(unknownField).toMatchObject({ code: "invalid_request", status: 400, retryable: false })
    expect(pathsOf(unknownField)).toEqual([["bogus"]])
    // A key a header cannot carry as it is (outside printable ASCII), an empty one and a long one.
    const refusals: Record<string, { details?: unknown }> = {}
    for (const key of ["ключ", "a\nb", "tab\there", "caf\u00e9", "", "k".repeat(257)]) {
      const refused = await session.send("x", { idempotencyKey: key }).catch((e) => e)
      expect(refused, JSON.stringify(key)).toMatchObject({ code: "invalid_request", status: 400, retryable: false })
      expect(pathsOf(refused)?.[0], JSON.stringify(key)).toEqual(["idempotency-key"])
      refusals[key] = refused
    }
    expect(recording.sent.slice(sentBefore)).toEqual([])
    // The server lists the same issues for the keys a header can carry at all (a Latin-1 byte, a long key).
    for (const key of ["caf\u00e9", "k".repeat(257)]) {
      const raw = await fetch(`${server.baseUrl}/v1/sessions/${session.id}/messages`, {
        method: "POST",
        headers: { "idempotency-key": key, "content-type": "application/json" },
        body: JSON.stringify({ input: { message: "x" } })
      })
      const body = (await raw.json()) as { code: string; details: unknown }
      expect([raw.status, body.code, body.details], JSON.stringify(key)).toEqual([400, "invalid_request", refusals[key]!.details])
    }
    await client.close()
  })

  it("many calls in flight on one client add no listener per call to a client-wide signal: no MaxListenersExceededWarning, and close still aborts them all", async () => {
    const warnings: Array<Error> = []
    const onWarning = (w: Error) => void warnings.push(w)
    process.on("warning", onWarning)
    const client = new Brain({ baseUrl: server.baseUrl })
    try {
      const sessions = await Promise.all(Array.from({ length: 12 }, () => client.sessions.create(scripted)))
      await Promise.all(sessions.map((s) => s.send("at once")))
      const slow = await client.sessions.create({ model: { provider: "scripted", replies: [{ text: "late", delay_ms: 30_000 }] } })
      const pending = Array.from({ length: 12 }, () => client.sessions.get(slow.id).then(() => slow.send("wait")).catch((e) => e))
      await new Promise((r) => setTimeout(r, 200))
      await client.close()
      const settled = await Promise.all(pending)
      expect(settled.every((e) => e instanceof BrainClosed || e?.code === "session_busy"), JSON.stringify(settled.map((e) => e?.constructor?.name ?? e?.code))).toBe(true)
      expect(settled.some((e) => e instanceof BrainClosed)).toBe(true)
    } finally {
      process.off("warning", onWarning)
      await client.close()
    }
    await new Promise((r) => setImmediate(r))
    expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([])
  })

  it("a request whose answer was lost is retried with the same Idempotency-Key, body and mode, and its turn runs once", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create(scripted)
    const isMessage = (s: { url: string; method: string }) => s.method === "POST" && s.url.endsWith("/messages")

    recording.dropAnswer(isMessage)
    const outcome = await session.send("exactly once")
    expect(outcome.turn.status).toBe("ended")
    recording.dropAnswer(isMessage)
    const receipt = await session.submit("submitted once")
    await takeUntil(session.events(receipt.sequence - 1), isTurnEnd)
    await client.close()

    const attempts = recording.sent.filter(isMessage)
    expect(attempts).toHaveLength(4)
    const [send1, send2, submit1, submit2] = attempts
    expect(send2!.headers["idempotency-key"]).toBe(send1!.headers["idempotency-key"])
    expect(send2!.body).toBe(send1!.body)
    expect(send1!.headers.prefer).toBeUndefined()
    expect(send2!.headers.prefer).toBeUndefined()
    expect(submit2!.headers["idempotency-key"]).toBe(submit1!.headers["idempotency-key"])
    expect(submit2!.body).toBe(submit1!.body)
    expect([submit1!.headers.prefer, submit2!.headers.prefer]).toEqual(["respond-async", "respond-async"])
    expect(submit1!.headers["idempotency-key"]).not.toBe(send1!.headers["idempotency-key"])

    const started = (await history(brain, session.id)).filter((e) => e.kind === "turn_started")
    expect(started.map((e) => (e.data as { input: { message: string } }).input.message)).toEqual(["exactly once", "submitted once"])
  })

  it("a send refused 503 overloaded is sent again with the same Idempotency-Key, body and mode, and its turn runs once", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create(scripted)
    const isMessage = (s: { url: string; method: string }) => s.method === "POST" && s.url.endsWith("/messages")
    recording.answerOnce(isMessage, () => jsonAnswer(503, { code: "overloaded", message: "draining", retryable: true }))
    const outcome = await session.send("after the overload", { idempotencyKey: "overloaded-key" })
    await client.close()

    expect(outcome.turn).toMatchObject({ status: "ended", result: { text: "after the overload" } })
    const attempts = recording.sent.filter(isMessage)
    expect(attempts).toHaveLength(2)
    expect(attempts.map((s) => s.headers["idempotency-key"])).toEqual(["overloaded-key", "overloaded-key"])
    expect(attempts[1]!.body).toBe(attempts[0]!.body)
    expect(attempts.map((s) => s.headers.prefer)).toEqual([undefined, undefined])
    expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(1)
  })

  it("a gateway's page (502, 503, 504 without the contract's body) is bad_response, retryable, and sent again under the same key: the request runs once; any other answer outside the contract is final", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create(scripted)
    const isGet = (s: { url: string; method: string }) => s.method === "GET" && s.url.endsWith(session.id)
    const isMessage = (s: { url: string; method: string }) => s.method === "POST" && s.url.endsWith("/messages")
    // A load balancer's page while the server restarts: whether the request reached it is unknown.
    for (const status of [502, 503, 504]) {
      recording.answerOnce(isMessage, () => new Response(`<html>${status}</html>`, { status, headers: { "content-type": "text/html" } }))
      const outcome = await session.send(`through ${status}`, { idempotencyKey: `gateway-${status}` })
      expect(outcome.turn).toMatchObject({ status: "ended", result: { text: `through ${status}` } })
      expect(recording.sent.filter(isMessage).filter((s) => s.headers["idempotency-key"] === `gateway-${status}`)).toHaveLength(2)
    }
    expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(3)
    // Past the attempts, the last one's error: retryable, with its status.
    let pages = 0
    const behindGateway = new Brain({
      baseUrl: server.baseUrl,
      fetch: async (url, init) => url.endsWith(session.id) ? (pages++, new Response("<html>bad gateway</html>", { status: 502 })) : fetch(url, init)
    })
    const proxied = await behindGateway.sessions.get(session.id).catch((e) => e)
    await behindGateway.close()
    expect(proxied).toBeInstanceOf(BrainError)
    expect(proxied).toMatchObject({ code: "bad_response", status: 502, retryable: true })
    expect(pages).toBe(4)
    const gets = recording.sent.filter(isGet).length
    // Other pages are final: sent once.
    recording.answerOnce(isGet, () => new Response("<html>teapot</html>", { status: 418, headers: { "content-type": "text/html" } }))
    expect(await client.sessions.get(session.id).catch((e) => e)).toMatchObject({ code: "bad_response", status: 418, retryable: false })
    recording.answerOnce(isGet, () => jsonAnswer(409, { code: "session_busy", message: "busy", retryable: true }))
    expect(await client.sessions.get(session.id).catch((e) => e)).toMatchObject({ code: "session_busy", status: 409, retryable: true })
    expect(recording.sent.filter(isGet).length - gets).toBe(2)
    await client.close()
  })

  it("a success status the route does not declare (200 on a create, 201 or 204 on a read) is bad_response with that status, final: sent once, never network_error", async () => {
    const session = await brain.sessions.create(scripted)
    const cases: ReadonlyArray<readonly [number, string, (client: Brain) => Promise<unknown>]> = [
      [200, "create", (client) => client.sessions.create(scripted)],
      [201, "get", (client) => client.sessions.get(session.id)],
      [204, "get", (client) => client.sessions.get(session.id)],
      [204, "list", (client) => client.sessions.list({})]
    ]
    for (const [status, what, call] of cases) {
      let sent = 0
      const client = new Brain({
        baseUrl: server.baseUrl,
        fetch: async () => (sent++, new Response(status === 204 ? null : "<html>proxy</html>", { status, headers: { "content-type": "text/html" } }))
      })
      const failed = await call(client).catch((e) => e)
      await client.close()
      expect(failed, `${status} on ${what}`).toBeInstanceOf(BrainError)
      expect(failed, `${status} on ${what}`).toMatchObject({ code: "bad_response", status, retryable: false })
      expect(sent, `${status} on ${what}`).toBe(1)
    }
  })

  it("close rejects a request in flight with BrainClosed and sends nothing that stops its turn: the turn runs to its end", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create({ model: { provider: "scripted", replies: [{ text: "slow", delay_ms: 500 }] } })
    const sending = session.send("in flight").catch((e) => e)
    const live = (await brain.sessions.get(session.id)).events(session.summary.last_sequence)
    await takeUntil(live, (e) => e.kind === "turn_started")
    await client.close()
    expect(await sending).toBeInstanceOf(BrainClosed)
    expect((await takeUntil(live, isTurnEnd)).at(-1)!.kind).toBe("turn_ended")
    await live.return()
    expect(recording.sent.map((s) => `${s.method} ${new URL(s.url).pathname.split("/").at(-1)}`)).toEqual([
      "POST sessions",
      "POST messages"
    ])
  })

  it("every mutating call carries an Idempotency-Key, the caller's when given", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create(scripted, { idempotencyKey: "create-key-1" })
    await session.send("one")
    await session.submit("two")
    await takeUntil(session.events(0), (e) => e.kind === "turn_ended" && (e.data as { sequence: number }).sequence > 3)
    await session.interrupt()
    await session.end()
    await session.delete()
    await client.close()
    const mutating = recording.sent.filter((s) => s.method !== "GET")
    expect(mutating.map((s) => s.method)).toEqual(["POST", "POST", "POST", "POST", "POST", "DELETE"])
    for (const s of mutating) expect(s.headers["idempotency-key"]).toMatch(/^.{1,256}$/)
    expect(mutating[0]!.headers["idempotency-key"]).toBe("create-key-1")
    expect(new Set(mutating.map((s) => s.headers["idempotency-key"])).size).toBe(mutating.length)
  })

  it("the same send again while the first still runs waits for it under the key and resolves with its outcome; a final ambiguous and a conflict are typed errors, never retried", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create({ model: { provider: "scripted", replies: [{ text: "slow", delay_ms: 1_000 }] } })
    const isSend = (s: { url: string; method: string }) => s.method === "POST" && s.url.endsWith("/messages")
    const first = session.send("one", { idempotencyKey: "turn-key" })
    const live = session.events(session.summary.last_sequence)
    await takeUntil(live, (e) => e.kind === "turn_started")
    await live.return()
    // The same request again while the first still runs: its claim has no answer yet (409 ambiguous, retryable).
    const again = await session.send("one", { idempotencyKey: "turn-key" })
    expect(again).toEqual(await first)
    expect(again.turn.status).toBe("ended")
    const waited = recording.sent.filter(isSend).length - 1
    expect(waited).toBeGreaterThanOrEqual(2)
    const conflict = await session.send("another body", { idempotencyKey: "turn-key" }).catch((e) => e)
    expect(conflict).toMatchObject({ _tag: "BrainError", code: "conflict", status: 409, idempotencyKey: "turn-key" })
    // A claim whose answer was never recorded (a crash in between) is final.
    recording.answerOnce(isSend, () => jsonAnswer(409, { code: "ambiguous", message: "accepted but never recorded", retryable: false }))
    const final = await session.send("two", { idempotencyKey: "crashed-key" }).catch((e) => e)
    expect(final).toBeInstanceOf(BrainError)
    expect(final).toMatchObject({ code: "ambiguous", status: 409, retryable: false, idempotencyKey: "crashed-key" })
    await client.close()
    expect(recording.sent.filter(isSend)).toHaveLength(1 + waited + 1 + 1)
    expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(1)
  })

  it("close is idempotent, ends a live iterator, rejects every later call with BrainClosed, and leaves the sessions usable from another client", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const session = await client.sessions.create(scripted)
    await session.send("before close")
    const live = session.events(session.summary.last_sequence)
    const pending = live.next()
    await recording.streams(1)

    await client.close()
    await client.close()
    expect(client.closed).toBe(true)
    await expect(pending).rejects.toBeInstanceOf(BrainClosed)
    const later = await Promise.all([
      client.sessions.create(scripted).catch((e) => e),
      client.sessions.get(session.id).catch((e) => e),
      client.sessions.list().catch((e) => e),
      session.send("after close").catch((e) => e),
      session.submit("after close").catch((e) => e),
      session.transcript().catch((e) => e),
      session.interrupt().catch((e) => e),
      session.end().catch((e) => e),
      session.delete().catch((e) => e),
      session.events(0).next().catch((e) => e)
    ])
    for (const e of later) expect(e).toBeInstanceOf(BrainClosed)
    expect(recording.sent.filter((s) => s.method !== "GET")).toHaveLength(2) // the create and the send before close

    const other = await brain.sessions.get(session.id)
    expect(other.summary.status).toBe("idle")
    expect((await other.send("after the other client closed")).turn.status).toBe("ended")
  })
})
