/**
 * The host registrations file while the server runs (src/layers/hosts/Compaction.ts): a host
 * reopening its command stream in a loop cannot grow the file without bound, and what a restart
 * reads from the rewritten file is what the appended one said.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import { make } from "../../src/layers/HostsFile.js"
import { REGISTRATIONS_COMPACT_MIN_BYTES } from "../../src/layers/hosts/Compaction.js"
import { foldRegistrations, idleSince } from "../../src/layers/hosts/Registrations.js"

const options = (dataDir: string) => ({ dataDir, graceMs: 100, heartbeatMs: 0, maxResultBytes: 1024 })
const fileOf = (dataDir: string) => path.join(dataDir, "hosts", "registrations.jsonl")
const SESSION = "ses_0000000000000000000000000a" as SessionId

describe("the host registrations file while the server runs", () => {
  it.live("a host reopening its stream 1 500 times keeps the file within twice what stands and REGISTRATIONS_COMPACT_MIN_BYTES; a restart reads the same registrations, namings and connection", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-compact-"))
      const registry = yield* make(options(dir))
      const flapping = yield* registry.register
      const quiet = yield* registry.register
      yield* registry.use(flapping.host_id as HostId, SESSION)
      let largest = 0
      for (let i = 0; i < 1500; i++) {
        const stream = yield* registry.connect(flapping.host_id as HostId)
        // The previous stream's close is recorded in the background: let it be written.
        yield* Effect.yieldNow()
        if (i === 1499) break
        yield* stream.stop
        largest = Math.max(largest, fs.statSync(fileOf(dir)).size)
      }
      // Without a rewrite 1 500 openings and closes would be about 200 KiB.
      expect(largest).toBeLessThanOrEqual(REGISTRATIONS_COMPACT_MIN_BYTES + 1024)
      const { standing } = foldRegistrations(fs.readFileSync(fileOf(dir), "utf8"))
      expect([...standing.keys()].sort()).toEqual([flapping.host_id, quiet.host_id].sort())
      const host = standing.get(flapping.host_id as HostId)!
      expect([...host.sessions.keys()]).toEqual([SESSION])
      // Its last stream is open: the file says so (a restart counts it connected until then).
      expect(idleSince(host)).toBeUndefined()
      expect(fs.readdirSync(path.dirname(fileOf(dir)))).toEqual(["registrations.jsonl"])
      const again = yield* make(options(dir))
      expect(again.authorize(flapping.host_id, flapping.token)).toBe(true)
      expect(again.authorize(quiet.host_id, quiet.token)).toBe(true)
    })))
})
