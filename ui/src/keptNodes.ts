// Lists that are drawn again keep the elements of what did not change: a
// chat's messages when a reply starts or its message is stored, the chat
// list when one chat starts answering. On a machine without a GPU every
// element built again is styled, laid out and painted again (in software),
// and at Send that CPU is taken from the engine reading the prompt. Each
// element is built from a key (a string of everything it shows); a redraw
// reuses the element whose key is unchanged and only moves, adds or removes
// elements, so the page lays out and paints what changed.

/** Elements by slot (a message's id, a chat's id), each kept while its key stays the same. */
export class KeptNodes<T extends Node = HTMLElement> {
  private drawn = new Map<string, { key: string; node: T }>();
  private asked = new Set<string>();
  /** How many elements were built, not reused (tests count them). */
  built = 0;

  /** The element of `slot` for `key`: the one drawn before if it was drawn
   * for the same key, else a new one from `build`. */
  get(slot: string, key: string, build: () => T): T {
    this.asked.add(slot);
    const was = this.drawn.get(slot);
    if (was && was.key === key) return was.node;
    const node = build();
    this.built++;
    this.drawn.set(slot, { key, node });
    return node;
  }

  /** Forgets the slots not asked for since the last sweep (gone from the list). */
  sweep(): void {
    for (const slot of this.drawn.keys()) if (!this.asked.has(slot)) this.drawn.delete(slot);
    this.asked.clear();
  }
}

/** Makes `parent`'s children exactly `wanted`, in order: what is not wanted
 * is removed, then each wanted node already in place is left alone and the
 * others are inserted (or moved) where they belong. */
export function placeChildren(parent: Node, wanted: Node[]): void {
  const keep = new Set(wanted);
  for (let n = parent.firstChild; n;) {
    const next = n.nextSibling;
    if (!keep.has(n)) parent.removeChild(n);
    n = next;
  }
  let at = parent.firstChild;
  for (const n of wanted) {
    if (n === at) at = at.nextSibling;
    else parent.insertBefore(n, at);
  }
}

const keys = new WeakMap<object, string>();

/** A record's key: its JSON, worked out once per object (records from the
 * backend are replaced, never changed in place). */
export function recordKey(record: object): string {
  let key = keys.get(record);
  if (key === undefined) {
    key = JSON.stringify(record);
    keys.set(record, key);
  }
  return key;
}
