/**
 * The running server's compaction of the host registrations file (src/layers/hosts/Compaction.ts)
 * when the file has grown past its bound but cannot be read (EIO, EMFILE, …): it is left as it
 * is, never rewritten as if it held no host.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { vi } from "vitest"
import { Effect } from "effect"
import type { HostId } from "../../src/domain/Ids.js"
import { makeCompaction, REGISTRATIONS_COMPACT_MIN_BYTES } from "../../src/layers/hosts/Compaction.js"
import { foldRegistrations, registrationLine } from "../../src/layers/hosts/Registrations.js"

const failing = vi.hoisted(() => ({ path: "" }))

vi.mock("node:fs/promises", async (importOriginal) => {
  const real = await importOriginal<typeof import("node:fs/promises")>()
  const readFile = ((file: unknown, ...rest: Array<unknown>) =>
    file === failing.path
      ? Promise.reject(Object.assign(new Error(`EIO: i/o error, open '${String(file)}'`), { code: "EIO" }))
      : (real.readFile as (...a: Array<unknown>) => Promise<unknown>)(file, ...rest)) as typeof real.readFile
  return { ...real, default: { ...real, readFile }, readFile }
})

describe("the host registrations file's compaction, the file unreadable", () => {
  it.live("a file grown past its bound that cannot be read is left whole: no registration lost", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-compact-eio-"))
      const file = path.join(dir, "registrations.jsonl")
      const lines: Array<string> = []
      for (let i = 0; lines.join("\n").length <= REGISTRATIONS_COMPACT_MIN_BYTES + 1024; i++) {
        lines.push(registrationLine(`host_01m985qz${String(i).padStart(18, "0")}` as HostId, Buffer.alloc(32, i % 256), i))
      }
      fs.writeFileSync(file, `${lines.join("\n")}\n`)
      const before = fs.readFileSync(file, "utf8")
      failing.path = file
      yield* makeCompaction(file).ifGrown
      failing.path = ""
      expect(fs.readFileSync(file, "utf8")).toBe(before)
      expect(foldRegistrations(before).standing.size).toBe(lines.length)
      // Readable again, the same compaction rewrites it to what stands: every registration kept.
      yield* makeCompaction(file).ifGrown
      expect(foldRegistrations(fs.readFileSync(file, "utf8")).standing.size).toBe(lines.length)
    }))
})
