/**
 * A tool call's stop (src/layers/CallStop.ts): its listeners and its AbortSignal see one stop, once,
 * whichever is read or added first; and the AbortSignal is made only when an executor reads it.
 */
import { afterEach, describe, expect, it, vi } from "vitest"
import { CallStop, stopOf } from "../../src/layers/CallStop.js"

afterEach(() => vi.unstubAllGlobals())

describe("a tool call's stop", () => {
  it("runs each listener once, in the order added, on the first abort; a later abort changes nothing", () => {
    const stop = new CallStop()
    const seen: Array<string> = []
    stop.onAbort(() => seen.push("a"))
    stop.onAbort(() => seen.push("b"))
    expect(stop.aborted).toBe(false)
    stop.abort("timeout")
    stop.abort("cancelled")
    expect(stop.aborted).toBe(true)
    expect(seen).toEqual(["a", "b"])
    expect(stop.signal.reason).toBe("timeout")
  })

  it("calls a listener added after the stop at once, and never a removed one", () => {
    const stop = new CallStop()
    const removed = vi.fn()
    stop.onAbort(removed)()
    stop.abort("cancelled")
    expect(removed).not.toHaveBeenCalled()
    const late = vi.fn()
    stop.onAbort(late)
    expect(late).toHaveBeenCalledTimes(1)
  })

  it("neither calls a listener another removes during the stop, nor skips one after a listener that removes itself", () => {
    const stop = new CallStop()
    const seen: Array<string> = []
    let removeA = () => {}
    let removeC = () => {}
    removeA = stop.onAbort(() => {
      seen.push("a")
      removeA()
      removeC()
    })
    stop.onAbort(() => seen.push("b"))
    removeC = stop.onAbort(() => seen.push("c"))
    stop.onAbort(() => seen.push("d"))
    stop.abort("cancelled")
    expect(seen).toEqual(["a", "b", "d"])
  })

  it("gives a signal read before the stop that aborts with it, and one read after already aborted with its reason", () => {
    const before = new CallStop()
    const signal = before.signal
    const onAbort = vi.fn()
    signal.addEventListener("abort", onAbort)
    expect(signal.aborted).toBe(false)
    before.abort("timeout")
    expect(onAbort).toHaveBeenCalledTimes(1)
    expect(signal.reason).toBe("timeout")
    expect(before.signal).toBe(signal)

    const after = new CallStop()
    after.abort("interrupted")
    expect(after.signal.aborted).toBe(true)
    expect(after.signal.reason).toBe("interrupted")
  })

  it("makes no AbortSignal for a call whose executor never reads it", () => {
    let made = 0
    const Real = globalThis.AbortController
    vi.stubGlobal("AbortController", class extends Real {
      constructor() {
        super()
        made++
      }
    })
    const stop = new CallStop()
    const listener = vi.fn()
    stop.onAbort(listener)()
    stop.onAbort(listener)
    stop.abort("cancelled")
    expect(listener).toHaveBeenCalledTimes(1)
    expect(made).toBe(0)
    expect(stop.signal.aborted).toBe(true)
    expect(made).toBe(1)
  })

  it("follows the signal of an invocation made with a signal only", () => {
    const controller = new AbortController()
    const stop = stopOf({ signal: controller.signal })
    const removed = vi.fn()
    const kept = vi.fn()
    stop.onAbort(removed)()
    stop.onAbort(kept)
    expect(stop.aborted).toBe(false)
    controller.abort("cancelled")
    expect(stop.aborted).toBe(true)
    expect(kept).toHaveBeenCalledTimes(1)
    expect(removed).not.toHaveBeenCalled()
    const late = vi.fn()
    stop.onAbort(late)
    expect(late).toHaveBeenCalledTimes(1)
  })

  it("is an invocation's own stop when it has one", () => {
    const own = new CallStop()
    expect(stopOf({ stop: own, signal: own.signal })).toBe(own)
  })
})
