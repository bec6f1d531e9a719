/**
 * The memory a JSON value holds, in bytes, for the budgets of what Brain keeps in memory.
 *
 * Counted from the value itself, not from a guess per item: a 1 MB message counts about 1 MB and
 * a short one a few dozen bytes. The constants follow V8's layout on 64-bit machines closely
 * enough for a budget (a string costs its header plus one byte per character, as V8 stores
 * Latin-1 text; text outside Latin-1 costs two, so such text is undercounted by at most half;
 * an object or array costs a header plus a pointer-sized slot per entry).
 */

/** Bytes. A heap object's header. */
const HEADER = 16
/** Bytes. One slot of an array or object: a tagged pointer. */
const SLOT = 8
/** Bytes. A number kept as a heap number. */
const NUMBER = 16

/** The approximate bytes a JSON value holds in memory. */
export const jsonBytes = (value: unknown): number => {
  switch (typeof value) {
    case "string":
      return HEADER + value.length
    case "number":
      return NUMBER
    case "boolean":
    case "undefined":
      return SLOT
    case "object": {
      if (value === null) return SLOT
      if (Array.isArray(value)) {
        let n = HEADER + SLOT * value.length
        for (let i = 0; i < value.length; i++) n += jsonBytes(value[i])
        return n
      }
      let n = HEADER
      for (const key in value) {
        // Keys are interned strings shared by every object that has them: one slot each.
        n += SLOT + jsonBytes((value as Record<string, unknown>)[key])
      }
      return n
    }
    default:
      return SLOT
  }
}
