/**
 * A OneThread with a deadline (src/layers/wasm/OneThread.ts): a request its thread has not answered
 * by the deadline is answered `overdue` and its thread terminated; the requests waiting behind it
 * are answered by a new thread, in their order.
 */
import { describe, expect, it } from "vitest"
import { oneThread } from "../../../src/layers/wasm/OneThread.js"

const HANGING = new URL("../../support/hanging-worker.mjs", import.meta.url)

describe("a thread's deadline", () => {
  it("a request held past the deadline is answered overdue, and the requests behind it are answered by a new thread, in order", async () => {
    const ask = oneThread<{ readonly hang?: boolean; readonly value?: number }, number>(HANGING, {
      // A request that hangs is given 300 ms; the others far more than a thread takes to start on a busy machine.
      deadlineMs: (request) => request.hang === true ? 300 : 120_000
    })
    const stuck = ask({ hang: true })
    const behind = [ask({ value: 1 }), ask({ value: 2 })]
    const answer = await stuck
    expect("error" in answer && answer.overdue).toBe(true)
    expect(await Promise.all(behind)).toEqual([{ id: 1, ok: 1 }, { id: 2, ok: 2 }])
    // The new thread serves later requests too; a second hang is bounded the same way.
    expect(await ask({ value: 3 })).toEqual({ id: 3, ok: 3 })
    const again = await ask({ hang: true })
    expect("error" in again && again.overdue).toBe(true)
    expect(await ask({ value: 4 })).toEqual({ id: 5, ok: 4 })
  })

  it("without a deadline nothing is answered overdue (requests are served in order, as before)", async () => {
    const ask = oneThread<{ readonly value?: number }, number>(HANGING)
    expect(await Promise.all([ask({ value: 7 }), ask({ value: 8 })])).toEqual([{ id: 0, ok: 7 }, { id: 1, ok: 8 }])
  })
})
