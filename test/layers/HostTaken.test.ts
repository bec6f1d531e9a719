/**
 * The results the registry remembers taking from hosts (src/layers/hosts/Taken.ts): never more than
 * its count, the newest ones kept, none past its age; a receipt told before or after the repeat
 * asks for it reaches the repeat.
 */
import { describe, expect, it } from "vitest"
import { answerDigest, TakenResults } from "../../src/layers/hosts/Taken.js"
import { Once } from "../../src/layers/Waits.js"

const told = (recorded: boolean) => (tell: (r: boolean) => void) => {
  tell(recorded)
  return () => {}
}

describe("the results taken from hosts, remembered", () => {
  it("keeps exactly the newest `max` of many more taken, across hosts, whatever the ring has wrapped", () => {
    let now = 0
    const taken = new TakenResults({ max: 7, keepMs: 1_000_000 }, () => now)
    for (let i = 0; i < 100; i++) {
      now++
      taken.remember(`host_${i % 3}`, `ses/${i}`, `d${i}`, told(true))
      expect(taken.size).toBe(Math.min(i + 1, 7))
    }
    for (let i = 0; i < 100; i++) {
      const found = taken.find(`host_${i % 3}`, `ses/${i}`)
      if (i < 93) expect(found).toBeUndefined()
      else expect(found?.digest).toBe(`d${i}`)
    }
    // A host reaches only its own.
    expect(taken.find("host_0", "ses/94")).toBeUndefined()
  })

  it("forgets what was taken keepMs ago or longer, oldest first, wherever the ring starts", () => {
    let now = 0
    const taken = new TakenResults({ max: 4, keepMs: 10 }, () => now)
    for (let i = 0; i < 6; i++) taken.remember("h", `s/${i}`, "d", undefined)
    now = 5
    taken.remember("h", "s/6", "d", undefined)
    now = 9
    expect(taken.find("h", "s/3")).toBeDefined()
    now = 10
    expect(taken.find("h", "s/5")).toBeUndefined()
    expect(taken.find("h", "s/6")).toBeDefined()
    expect(taken.size).toBe(1)
    now = 15
    expect(taken.find("h", "s/6")).toBeUndefined()
    expect(taken.size).toBe(0)
  })

  it("tells a repeat the call's receipt: at once when known, when given otherwise; true when the call has none", () => {
    const taken = new TakenResults({ max: 4, keepMs: 1_000 }, () => 0)
    const receipt = new Once<boolean>()
    taken.remember("h", "s/1", "d", (tell) => receipt.listen(tell))
    taken.remember("h", "s/2", "d", told(false))
    taken.remember("h", "s/3", "d", undefined)
    const heard: Array<string> = []
    taken.find("h", "s/1")!.recorded((r) => heard.push(`1:${r}`))
    taken.find("h", "s/2")!.recorded((r) => heard.push(`2:${r}`))
    taken.find("h", "s/3")!.recorded((r) => heard.push(`3:${r}`))
    const stop = taken.find("h", "s/1")!.recorded((r) => heard.push(`1 stopped:${r}`))
    stop()
    expect(heard).toEqual(["2:false", "3:true"])
    receipt.give(true)
    expect(heard).toEqual(["2:false", "3:true", "1:true"])
    taken.find("h", "s/1")!.recorded((r) => heard.push(`1 again:${r}`))
    expect(heard.at(-1)).toBe("1 again:true")
  })

  it("a digest is the same for the same kind and value's JSON, and differs when either does", () => {
    const json = JSON.stringify({ n: 1 })
    expect(answerDigest({ ok: { n: 1 } }, json)).toBe(answerDigest({ ok: { n: 1 } }, json))
    const digests = [
      answerDigest({ ok: { n: 1 } }, json),
      answerDigest({ error: { n: 1 } }, json),
      answerDigest({ ok: { n: 2 } }, JSON.stringify({ n: 2 })),
      answerDigest({ ok: "stopped" }, JSON.stringify("stopped")),
      answerDigest({ ok: null }, "null"),
      answerDigest({ stopped: true }, undefined)
    ]
    expect(new Set(digests).size).toBe(digests.length)
  })

  it("the same call remembered for one host is not found for another", () => {
    const taken = new TakenResults({ max: 4, keepMs: 1_000 }, () => 0)
    taken.remember("h1", "s/1", "d", undefined)
    expect(taken.find("h2", "s/1")).toBeUndefined()
    expect(taken.find("h1", "s/1")?.digest).toBe("d")
  })
})
