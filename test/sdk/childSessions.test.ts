/**
 * `send(input, { signal })` against a real server process (seed "Lifecycle": an owning host tool
 * passes its signal to `child.send`): an abort waits for the turn's admission before it cancels,
 * so the cancel never passes the turn it is meant for, and `send` rejects only after the cancel
 * has been answered, when the child's turn is already closed as cancelled.
 */
import { Schema } from "effect"
import { describe, expect, it } from "@effect/vitest"
import { Brain, type Event, type Session, tool, ToolAborted, type ToolContext } from "../../src/sdk/index.js"
import { gate, history, serverAndClient } from "./support.js"
import type { ServerProcess } from "../support/server.js"

/** A model that takes a long time to answer: only a cancel ends its turn soon. */
const slowModel = { model: { provider: "scripted" as const, replies: [{ text: "much later", delay_ms: 30_000 }] } }

const turnEnds = (events: ReadonlyArray<Event>) => events.filter((e) => e.kind === "turn_ended" || e.kind === "turn_failed")

describe("send with a signal (child sessions)", () => {
  let brain: Brain
  let server: ServerProcess
  serverAndClient((started) => ({ brain, server } = started), { BRAIN_CANCEL_GRACE_MS: "10000" })

  it("an abort right after send waits for admission, then cancels: the turn is started and failed cancelled, and send rejects with the signal's reason", async () => {
    const child = await brain.sessions.create(slowModel)
    const controller = new AbortController()
    const sending = child.send("work", { signal: controller.signal })
    controller.abort(new Error("the owner stopped"))
    const rejected = await sending.catch((e) => e)
    expect(rejected).toMatchObject({ message: "the owner stopped" })
    // The cancel was answered before send rejected: the turn is closed already.
    const ends = turnEnds(await history(brain, child.id))
    expect(ends.map((e) => e.data)).toEqual([expect.objectContaining({ failure: expect.objectContaining({ code: "cancelled" }) })])
    // The session stays open for another turn.
    expect((await brain.sessions.get(child.id)).summary.status).toBe("idle")
  })

  it("an aborted signal sends nothing; a turn that answers first resolves as usual", async () => {
    const child = await brain.sessions.create({ model: { provider: "scripted" } })
    const aborted = AbortSignal.abort(new Error("already"))
    expect(await child.send("x", { signal: aborted }).catch((e) => e)).toMatchObject({ message: "already" })
    expect((await history(brain, child.id)).filter((e) => e.kind === "turn_started")).toHaveLength(0)
    const live = new AbortController()
    expect((await child.send("echo me", { signal: live.signal })).turn).toMatchObject({ status: "ended", result: { text: "echo me" } })
  })

  it("an abort while the server cannot be reached rejects with the signal's reason, not a network_error, and sends the turn no more", async () => {
    // Once `down`, every connection is refused, and the send's request in flight is cut.
    let isDown = false
    let cut: (e: unknown) => void = () => undefined
    const wentDown = new Promise<never>((_, reject) => (cut = reject))
    wentDown.catch(() => undefined)
    const refused = () => Object.assign(new TypeError("fetch failed"), { cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }) })
    let posts = 0
    let sent: () => void = () => undefined
    const posted = new Promise<void>((resolve) => (sent = resolve))
    const client = new Brain({
      baseUrl: server.baseUrl,
      fetch: async (url, init) => {
        if (isDown) throw refused()
        if (!(url.endsWith("/messages") && init.method === "POST")) return fetch(url, init)
        posts++
        sent()
        return Promise.race([fetch(url, init), wentDown])
      }
    })
    try {
      const child = await client.sessions.create(slowModel)
      const controller = new AbortController()
      const sending = child.send("work", { signal: controller.signal })
      await posted
      isDown = true
      cut(refused())
      const reason = new Error("the owner stopped")
      controller.abort(reason)
      expect(await sending.catch((e) => e)).toBe(reason)
      const postsAtRejection = posts
      // Its retries stopped: a later round of them would find the server back.
      isDown = false
      await new Promise((resolve) => setTimeout(resolve, 2000))
      expect(posts).toBe(postsAtRejection)
    } finally {
      await client.close()
    }
  })

  it("a turn that ends on its own after its admission, before the cancel reaches it, resolves with its outcome: nothing was cancelled", async () => {
    // The cancel is held back until the turn has ended, as a slow network would hold it.
    let ended: () => void = () => undefined
    const turnEnded = new Promise<void>((resolve) => (ended = resolve))
    const client = new Brain({
      baseUrl: server.baseUrl,
      fetch: async (url, init) => {
        if (url.endsWith("/cancel")) await turnEnded
        const answer = await fetch(url, init)
        if (url.includes("/messages") && init.method === "POST") ended()
        return answer
      }
    })
    try {
      const child = await client.sessions.create({ model: { provider: "scripted", replies: [{ text: "finished", delay_ms: 300 }] } })
      const controller = new AbortController()
      const sending = child.send("work", { signal: controller.signal })
      controller.abort(new Error("the owner stopped"))
      const outcome = await sending
      expect(outcome.turn).toMatchObject({ status: "ended", result: { text: "finished" } })
      const ends = turnEnds(await history(brain, child.id))
      expect(ends.map((e) => e.kind)).toEqual(["turn_ended"])
    } finally {
      await client.close()
    }
  })

  it("an owning host tool's child is cancelled through the parent's signal: the child's turn is closed cancelled before the tool sees send reject, and the parent's call is cancelled", async () => {
    const started = gate<{ ctx: ToolContext; child: Session }>()
    let seen: { reason: unknown; childEnds: ReadonlyArray<Event> } | undefined
    const delegate = tool({
      name: "delegate",
      input: Schema.Struct({ task: Schema.String }),
      run: async ({ task }, ctx) => {
        const child = await brain.sessions.create(slowModel)
        started.open({ ctx, child })
        try {
          return await child.send(task, { signal: ctx.signal })
        } catch (e) {
          seen = { reason: e, childEnds: turnEnds(await history(brain, child.id)) }
          throw e
        }
      }
    })
    const parent = await brain.sessions.create({
      model: { provider: "scripted", replies: [{ tool_calls: [{ name: "delegate", input: { task: "research" } }] }, { text: "done" }] },
      tools: [delegate]
    })
    const receipt = await parent.submit("go")
    const { ctx, child } = await started.promise
    await parent.interrupt()

    expect(seen?.reason).toBeInstanceOf(ToolAborted)
    expect(seen?.childEnds.map((e) => e.data)).toEqual([expect.objectContaining({ failure: expect.objectContaining({ code: "cancelled" }) })])
    const childEvents = await history(brain, child.id)
    expect(childEvents.filter((e) => e.kind === "turn_started").map((e) => e.data)).toEqual([expect.objectContaining({ input: { message: "research" }, mode: "send" })])
    const parentEvents = await history(brain, parent.id)
    expect(parentEvents.filter((e) => e.kind === "tool_call_failed").map((e) => e.data)).toEqual([
      expect.objectContaining({ sequence: ctx.sequence, outcome: "cancelled" })
    ])
    expect(turnEnds(parentEvents).at(-1)).toMatchObject({ kind: "turn_failed", data: { sequence: receipt.sequence } })
  })
})
