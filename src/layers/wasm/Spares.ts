/**
 * What the main thread keeps between activations (Inline.ts): spare memories, left by
 * activations at their initial size and zero-filled, and instances put back as instantiation left
 * them, with their memories. An instance is put back only when its twin can be reset
 * (Instrument.ts, RESET_EXPORTS) and its memory is still at its initial size: its memory is written
 * again from the module's image (taken right after its first instantiation) and zero beyond, its
 * mutable globals restored from the copy its twin saved at instantiation.
 */
import { SUSPEND_BYTES } from "./TwinExports.js"
import { PAGE_BYTES } from "./Module.js"

/** An instance as it rests between activations: what putting it back and taking it again need. */
export interface Resting {
  readonly memory: WebAssembly.Memory
  /**
   * Its memory as one Buffer over the memory's current ArrayBuffer, kept between calls (made again
   * only once the memory grew): `memory.buffer` is a call into V8's API each time, two to three a
   * put-back and one a take.
   */
  view(): Buffer
  readonly exports: Record<string, any>
  /** Its twin exports RESET_EXPORTS (and its code cannot change its tables or segments). */
  readonly resettable: boolean
  /** Its memory limits, `initial:maximum`. */
  readonly key: string
  /**
   * Restores its twin's globals as instantiation left them (RESET_EXPORTS.restore), and reads the
   * twin's written marks as they were before (for `written` and `low`).
   */
  restore(): void
  /**
   * One past the highest byte of its memory written since it was made or last put back (by its
   * guest, as its twin counts as `restore` read it, and by the host); its memory's size when its
   * twin does not count.
   */
  written(): number
  /**
   * The lowest byte of its memory written since it was made (its start function's stores aside:
   * they are its module's image) or last put back, by its guest or the host; 0 when its twin does
   * not count.
   */
  low(): number
  /**
   * A stretch of its memory that is likely still zero, as the last put-back left it (from
   * `quietFrom` up to `quietTo`; empty when they are equal): the suspension buffer's part above
   * everything Asyncify stored in it, which the host handed out and did not write. Its guest may
   * still have stored there, so the put-back checks that it is zero before it skips zeroing it.
   */
  readonly quietFrom: number
  readonly quietTo: number
  /** Clears what the activation left in the instance's host-side state. */
  rest(): void
}

/**
 * Spares: memories activations left at their initial size, zero-filled, and instances put back as
 * instantiation left them (with their memories), counted together. As many activations as run or
 * wait in host calls at once each hold one, so the spares cover that many at their peak over the
 * last five seconds (at least SPARE_MIN, at most SPARE_BYTES held in all): on a VM, a new memory
 * (its reservation, and the first touch of each page) costs about a millisecond, ten times a small
 * guest's whole activation, so a spare that goes when the load dips for a second is paid for again
 * when it comes back. When fewer activations run, the spares shrink with them within five seconds,
 * so an idle server keeps a few.
 *
 * A spare holds the pages its activations touched, not its whole memory: a bare memory is zeroed
 * whole (at most SPARE_MEMORY_BYTES), and an instance's put-back writes only what its activation
 * wrote when its twin counts that (Instrument.ts, "Written"), so an instance is put back whatever
 * its memory's size when the put-back writes at most SPARE_MEMORY_BYTES, and counts as the highest
 * byte any of its activations wrote.
 *
 * A memory dropped is not free either: V8 counts a memory's size against its heap's external
 * memory, and each dropped memory above a few MiB brings a garbage collection closer. Measured on
 * the project's VM, a module whose 65-page (4 MiB + 64 KiB) memory was made new for each
 * activation cost the main thread 1.4 to 2.7 ms of collection pauses per activation, one of 128 MiB
 * 5 to 9 ms, slowing every session. So a module whose initial memory is above
 * SPARE_MEMORY_BYTES and whose instance was dropped at its activation's end (it failed or grew its
 * memory, or its put-back would write more than SPARE_MEMORY_BYTES) gets no new memory on the main
 * thread (`newMemoryRefused`): its activations that find no spare instance run on worker threads,
 * until one of its instances is put back again. An activation that moved does not count: its
 * session runs on worker threads for a while anyway (InlineModules.ts).
 */
const SPARE_BYTES = 64 << 20
const SPARE_MEMORY_BYTES = 4 << 20
const SPARE_MIN = 4

const spareMemories = new Map<string, Array<WebAssembly.Memory>>()
/** Instances at rest, by module (the most recently used module last). */
const spareRuns = new Map<WebAssembly.Module, Array<Resting>>()
/**
 * The module last added to spareRuns or moved to its end: while it is in spareRuns it is its last
 * key (every other key added or moved since would have taken its place here), so an instance of it
 * put back needs no move. Its list is left in spareRuns when its last instance is taken (the next
 * put-back is most likely its own), the others' deleted: one module at most is kept so without a
 * spare.
 */
let lastRunModule: WebAssembly.Module | undefined
let spareBytes = 0
let spareCount = 0
/** Activations on the main thread now, from their start to their end, waits in host calls included. */
let running = 0

/** An activation on the main thread starts: it holds a memory until it ends. */
export const activationStarted = () => {
  running++
  if (running > peak) peak = running
}

export const activationEnded = () => void running--
/** The most that ran at once since the last tick of the trim, and in each of the SPARE_TICKS ticks before. */
let peak = 0
const SPARE_TICKS = 4
const peaks: Array<number> = []
const SPARE_TRIM_MS = 1_000
let trimming: ReturnType<typeof setInterval> | undefined

/**
 * Instances made, reused and put back on the main thread, the bytes put-backs zeroed above their
 * images, copied back from them, and found zero already (a quiet stretch, not zeroed again), since
 * the process started (for tests and benchmarks).
 */
export const instanceStats = { made: 0, reused: 0, putBack: 0, zeroed: 0, copied: 0, checked: 0, memories: 0 }

/** The bytes each instance at rest holds (counted in spareBytes): the highest byte any of its activations wrote, or its memory's size. */
const held = new WeakMap<Resting, number>()

/** Modules whose initial memory is above SPARE_MEMORY_BYTES and whose last instance to end was dropped, not put back. */
const bigDropped = new WeakSet<WebAssembly.Module>()

const big = (limits: { initial: number }) => limits.initial * PAGE_BYTES > SPARE_MEMORY_BYTES

/** An instance of `instrumented` was dropped at the end of its activation (failed, grown, or not put back). */
export const dropped = (instrumented: WebAssembly.Module, limits: { initial: number }) => {
  if (big(limits)) bigDropped.add(instrumented)
}

/**
 * Whether an activation of `instrumented` that finds no spare instance must not make a new memory
 * on the main thread (and runs on a worker thread instead): its initial memory is above
 * SPARE_MEMORY_BYTES and its last instance was dropped.
 */
export const newMemoryRefused = (instrumented: WebAssembly.Module, limits: { initial: number }): boolean => big(limits) && bigDropped.has(instrumented)

/** Why an activation `newMemoryRefused` moves to a worker thread. */
export const newMemoryReason = (limits: { initial: number }) =>
  `its memory of ${limits.initial} pages (${limits.initial * PAGE_BYTES} bytes) at start is above the ${SPARE_MEMORY_BYTES / PAGE_BYTES} pages (${SPARE_MEMORY_BYTES} bytes) the main thread makes new for a module whose instance it could not put back`

/** Drops spares past what the recent peak needs: bare memories first, then instances (the oldest limits' and modules' first). */
const trim = () => {
  let most = Math.max(SPARE_MIN, peak)
  for (let i = 0; i < peaks.length; i++) if (peaks[i]! > most) most = peaks[i]!
  // Nothing to drop, as at most put-backs: nothing made, no Map walked.
  if (spareBytes > SPARE_BYTES || spareCount > most) drop(most)
}

const drop = (most: number) => {
  const over = () => spareBytes > SPARE_BYTES || spareCount > most
  for (const [k, l] of spareMemories) {
    if (!over()) break
    while (l.length > 0 && over()) {
      spareBytes -= l.shift()!.buffer.byteLength
      spareCount--
    }
    if (l.length === 0) spareMemories.delete(k)
  }
  for (const [k, l] of spareRuns) {
    if (!over()) break
    while (l.length > 0 && over()) {
      spareBytes -= held.get(l.shift()!)!
      spareCount--
    }
    if (l.length === 0) spareRuns.delete(k)
  }
}

export const memoryFor = (limits: { initial: number; maximum: number }): WebAssembly.Memory => {
  const spare = spareMemories.get(`${limits.initial}:${limits.maximum}`)?.pop()
  if (spare === undefined) {
    instanceStats.memories++
    return new WebAssembly.Memory(limits)
  }
  spareBytes -= spare.buffer.byteLength
  spareCount--
  return spare
}

/** Counts a spare in, trims, and keeps the trim's tick going while there are spares or activations. */
const kept = (bytes: number) => {
  spareBytes += bytes
  spareCount++
  trim()
  if (trimming === undefined) {
    trimming = setInterval(() => {
      peaks.push(peak)
      if (peaks.length > SPARE_TICKS) peaks.shift()
      peak = running
      trim()
      if (spareCount === 0 && running === 0) {
        clearInterval(trimming)
        trimming = undefined
      }
    }, SPARE_TRIM_MS)
    trimming.unref()
  }
}

/** Whether a bare memory can be kept as a spare: still at its initial size, and not above SPARE_MEMORY_BYTES (it is zeroed whole). */
const keepable = (bytes: number, limits: { initial: number }) => bytes === limits.initial * PAGE_BYTES && bytes <= SPARE_MEMORY_BYTES

/** Keeps a memory left at its initial size for a later activation, zeroed now; past the bounds, the oldest limits' spares go first. */
export const recycle = (memory: WebAssembly.Memory, limits: { initial: number; maximum: number }) => {
  const bytes = memory.buffer.byteLength
  if (!keepable(bytes, limits)) return
  new Uint8Array(memory.buffer).fill(0)
  const key = `${limits.initial}:${limits.maximum}`
  const list = spareMemories.get(key) ?? []
  // Most recently used limits last, so the oldest are dropped first.
  spareMemories.delete(key)
  spareMemories.set(key, list)
  list.push(memory)
  kept(bytes)
}

/**
 * Each resettable module's memory as instantiation leaves it (its data segments, and what its
 * start function stored), up to its last non-zero byte: the same for every instance of the module,
 * which gets a zeroed or new memory and whose start function cannot call the host.
 */
const images = new WeakMap<WebAssembly.Module, Uint8Array>()

/** A quiet stretch shorter than this is zeroed with the rest, not checked first. */
const QUIET_BYTES = 256
/** Zeros to compare a quiet stretch with: as long as the longest (the suspension buffer). */
const ZEROS = Buffer.alloc(SUSPEND_BYTES)

/** Bytes compared at once while looking for an image's end: a zero stretch is passed at memcmp's speed, not a byte at a time. */
const IMAGE_SCAN_BYTES = 64 << 10
const SCAN_ZEROS = Buffer.alloc(IMAGE_SCAN_BYTES)

/**
 * Takes a module's image from the memory of an instance instantiation has just made (the first one
 * only). Its end is found from the memory's top down, a stretch at a time (a byte at a time only
 * in the last stretch holding one that is not zero): 128 MiB took 435 ms a byte at a time on the
 * project's VM, 86 ms so.
 */
export const imageKept = (instrumented: WebAssembly.Module, memory: WebAssembly.Memory) => {
  if (images.has(instrumented)) return
  const bytes = Buffer.from(memory.buffer)
  let end = bytes.length
  while (end > 0) {
    const from = Math.max(0, end - IMAGE_SCAN_BYTES)
    if (SCAN_ZEROS.compare(bytes, from, end, 0, end - from) !== 0) break
    end = from
  }
  while (end > 0 && bytes[end - 1] === 0) end--
  images.set(instrumented, Uint8Array.prototype.slice.call(bytes, 0, end))
}

/**
 * Puts a completed activation's instance back as instantiation left it and keeps it for the
 * module's next activation, when its twin can be reset and its memory is still at its initial
 * size; otherwise keeps only its memory (zeroed). Answers whether the instance was kept.
 */
export const putBack = (run: Resting, instrumented: WebAssembly.Module, limits: { initial: number; maximum: number }): boolean => {
  const memory = run.view()
  const bytes = memory.byteLength
  const image = images.get(instrumented)
  if (!run.resettable || image === undefined || bytes !== limits.initial * PAGE_BYTES) return notKept(run, instrumented, limits)
  // Its globals first (one call into the twin, which answers what its guest wrote): the memory is the host's to write.
  run.restore()
  // Outside what was written, the memory is still as the last put-back (or instantiation) left it:
  // its image, zeros above. Not writing them again spares the cache (docs/benchmarks.md, "The cost
  // of zeroing a memory the guest did not touch", "Wasm text turn, stop 60").
  const written = Math.min(bytes, run.written())
  const low = run.low()
  // The put-back writes from `low` up to `written` (its image copied back, zeros): at most SPARE_MEMORY_BYTES.
  if (written - Math.min(low, written) > SPARE_MEMORY_BYTES) return notKept(run, instrumented, limits)
  bigDropped.delete(instrumented)
  const imageEnd = Math.min(image.length, written)
  if (low < imageEnd) {
    memory.set(low === 0 && imageEnd === image.length ? image : image.subarray(low, imageEnd), low)
    instanceStats.copied += imageEnd - low
  }
  const zeroFrom = Math.max(low, image.length)
  if (written > zeroFrom) {
    // A quiet stretch (the suspension buffer's unused part, 8 KiB less what the stack took) that
    // reads as zero is left as it is: read, not written again (the lines it spans stay clean).
    const quietFrom = Math.max(run.quietFrom, zeroFrom)
    const quietTo = Math.min(run.quietTo, written)
    if (quietTo - quietFrom >= QUIET_BYTES && quietTo - quietFrom <= ZEROS.length && ZEROS.compare(memory, quietFrom, quietTo, 0, quietTo - quietFrom) === 0) {
      memory.fill(0, zeroFrom, quietFrom)
      memory.fill(0, quietTo, written)
      instanceStats.zeroed += quietFrom - zeroFrom + written - quietTo
      instanceStats.checked += quietTo - quietFrom
    } else {
      memory.fill(0, zeroFrom, written)
      instanceStats.zeroed += written - zeroFrom
    }
  }
  instanceStats.putBack++
  run.rest()
  let list = spareRuns.get(instrumented)
  if (list === undefined || lastRunModule !== instrumented) {
    list ??= []
    spareRuns.delete(instrumented)
    spareRuns.set(instrumented, list)
    lastRunModule = instrumented
  }
  list.push(run)
  const holds = Math.max(held.get(run) ?? 0, image.length, written)
  held.set(run, holds)
  kept(holds)
  return true
}

/** An instance not put back: only its memory is kept (zeroed). */
const notKept = (run: Resting, instrumented: WebAssembly.Module, limits: { initial: number; maximum: number }): false => {
  recycle(run.memory, limits)
  dropped(instrumented, limits)
  return false
}

/** A spare instance of `instrumented` with memory limits `key`, if one is kept. */
export const spareRun = <R extends Resting>(instrumented: WebAssembly.Module, key: string): R | undefined => {
  const list = spareRuns.get(instrumented)
  if (list === undefined) return undefined
  for (let i = list.length - 1; i >= 0; i--) {
    const run = list[i]!
    if (run.key !== key) continue
    // Its last, as a module's activations usually all have the same limits.
    if (i === list.length - 1) list.pop()
    else list.splice(i, 1)
    if (list.length === 0 && instrumented !== lastRunModule) spareRuns.delete(instrumented)
    spareBytes -= held.get(run)!
    spareCount--
    return run as R
  }
  return undefined
}
