import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Catalogue, RecordKinds, ReservedKinds } from "../../src/domain/Records.js"
import { FailureCodes } from "../../src/domain/Failure.js"

describe("Record catalogue", () => {
  it("docs/journal.md lists exactly the catalogue's kinds, groups and visibility", () => {
    const doc = fs.readFileSync(new URL("../../docs/journal.md", import.meta.url), "utf8")
    const section = doc.slice(doc.indexOf("## Record kinds"))
    const rows = [...section.matchAll(/^\| `([a-z_]+)` \| ([a-z]+) \| ([a-z]+)/gm)].map((m) => [m[1], m[2], m[3]])
    expect(rows).toEqual(RecordKinds.map((k) => [k, Catalogue[k].group, Catalogue[k].visibility]))
  })

  it("every system kind and transcript_replaced are reserved against extensions", () => {
    for (const k of RecordKinds) expect(ReservedKinds.has(k)).toBe(true)
    expect(ReservedKinds.has("transcript_replaced")).toBe(true)
    expect(ReservedKinds.has("progress")).toBe(false)
  })

  it("every public failure code is reserved against extensions: no Event can pass for a system outcome", () => {
    for (const code of FailureCodes) expect(ReservedKinds.has(code), code).toBe(true)
  })

  it("failure codes are a closed set without duplicates", () => {
    expect(new Set(FailureCodes).size).toBe(FailureCodes.length)
  })
})
