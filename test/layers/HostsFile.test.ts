/**
 * The host registry's file (`{dataDir}/hosts/registrations.jsonl`): a removal is durable and final,
 * a removed host frees its place under MAX_HOSTS' count, and a start compacts a file that holds
 * more removals than it needs, keeping exactly the registrations that stand.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { make } from "../../src/layers/HostsFile.js"

const options = (dataDir: string) => ({ dataDir, graceMs: 100, heartbeatMs: 0, maxResultBytes: 1024 })
const fileOf = (dataDir: string) => path.join(dataDir, "hosts", "registrations.jsonl")
const linesOf = (dataDir: string) => fs.readFileSync(fileOf(dataDir), "utf8").split("\n").filter((l) => l !== "")

describe("the host registry's file", () => {
  it.effect("a removed host stays removed after a restart, its token authorizes nothing, and the others stand", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const first = yield* make(options(dir))
      const a = yield* first.register
      const b = yield* first.register
      yield* first.unregister(a.host_id)
      expect(first.isRegistered(a.host_id)).toBe(false)
      expect(first.authorize(a.host_id, a.token)).toBe(false)
      const again = yield* make(options(dir))
      expect(again.isRegistered(a.host_id)).toBe(false)
      expect(again.authorize(a.host_id, a.token)).toBe(false)
      expect(again.authorize(b.host_id, b.token)).toBe(true)
    }))

  it.effect("a start rewrites a file of many removals to the registrations that stand, which keep their tokens", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const first = yield* make(options(dir))
      const kept = yield* first.register
      for (let i = 0; i < 40; i++) {
        const r = yield* first.register
        yield* first.unregister(r.host_id)
      }
      expect(linesOf(dir)).toHaveLength(81)
      const again = yield* make(options(dir))
      expect(linesOf(dir)).toHaveLength(1)
      expect(JSON.parse(linesOf(dir)[0]!)).toMatchObject({ host_id: kept.host_id })
      expect(again.authorize(kept.host_id, kept.token)).toBe(true)
      const third = yield* make(options(dir))
      expect(third.authorize(kept.host_id, kept.token)).toBe(true)
      expect(fs.readdirSync(path.dirname(fileOf(dir)))).toEqual(["registrations.jsonl"])
    }))
})
