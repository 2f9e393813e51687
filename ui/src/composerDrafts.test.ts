// The composer's drafts (one per chat) and images refused as they are
// attached (issue 29): what is typed in one chat never follows the user to
// another, a bad file is named and marked and never sent, the offer of a
// model that sees images follows the model and the images at once.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { Composer, type ComposerHooks } from './composer';
import { Drafts, fileName } from './drafts';
import type { Outgoing } from './api';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const sha = (c: string) => c.repeat(64);

function composer(over: Partial<ComposerHooks> = {}) {
  const sent: Outgoing[] = [];
  const c = new Composer({
    // as the app does: the message is drawn (the box empties), then the send ends
    send: async (m, shown) => { sent.push(m); shown(); return true; }, stop: () => {}, pickFiles: async () => [], toast: () => {},
    visionModels: async () => [], switchModel: async () => {}, openModels: () => {}, setAnswerFormat: async () => true, setThinking: async () => {},
    ...over,
  });
  document.body.append(c.el);
  c.setModel({ name: 'Tiny VL', vision: true });
  return { c, sent };
}

/** add_attachment_path as the app answers it: `cut.png` is refused as the app refuses a PNG cut short. */
function mockAttach() {
  mockIPC((cmd, args) => {
    if (cmd !== 'add_attachment_path') return undefined;
    const path = (args as { path: string }).path;
    if (path.endsWith('cut.png')) throw { code: 'IMAGE_UNREADABLE', message: 'this PNG image cannot be read: the file is cut short' };
    if (path.endsWith('.txt')) throw { code: 'NOT_AN_IMAGE', message: 'not a supported image: unrecognised file signature' };
    return { sha256: sha(path.includes('b') ? 'b' : 'a'), mime: 'image/png', size: 1, path };
  });
}

const send = (c: Composer) => c.el.querySelector<HTMLButtonElement>('[data-testid=send]')!.click();
const thumbs = (c: Composer, id = 'composer-thumb') => c.el.querySelectorAll(`[data-testid=${id}]`).length;

describe('a draft per chat', () => {
  it('keeps each chat’s text and images to itself, and sends only the open chat’s', async () => {
    mockAttach();
    const { c, sent } = composer();
    c.switchTo(1);
    c.input.value = 'half a question for chat 1';
    await c.addPaths(['/photos/a.png']);
    c.switchTo(2);
    // nothing of chat 1 follows the user here
    expect(c.input.value).toBe('');
    expect(thumbs(c)).toBe(0);
    c.input.value = 'Hello 2';
    send(c);
    await vi.waitFor(() => expect(sent).toEqual([{ text: 'Hello 2', attachments: [] }]));
    // back in chat 1: its text and image are there, unsent
    c.switchTo(1);
    expect(c.input.value).toBe('half a question for chat 1');
    expect(thumbs(c)).toBe(1);
    // and chat 2's box is empty after sending
    c.switchTo(2);
    expect(c.input.value).toBe('');
  });

  it('the new chat’s draft becomes the chat’s once sending creates it; an edit gives the draft back when it ends', async () => {
    mockAttach();
    const { c } = composer();
    c.switchTo('new');
    c.input.value = 'typed in the new chat';
    c.adopt(7);
    c.switchTo(8);
    c.switchTo('new');
    expect(c.input.value).toBe('');
    c.switchTo(7);
    expect(c.input.value).toBe('typed in the new chat');
    // editing an earlier message borrows the box; leaving the chat gives it back
    c.startEdit('the old question', [], () => {});
    expect(c.input.value).toBe('the old question');
    c.switchTo(8);
    c.switchTo(7);
    expect(c.input.value).toBe('typed in the new chat');
  });

  it('an image attached while the chat changes goes to the chat it was attached in', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => { release = r; });
    mockIPC(async (cmd, args) => {
      if (cmd !== 'add_attachment_path') return undefined;
      await gate;
      return { sha256: sha('a'), mime: 'image/png', size: 1, path: (args as { path: string }).path };
    });
    const { c } = composer();
    c.switchTo(1);
    const adding = c.addPaths(['/a.png']);
    c.switchTo(2);
    release();
    await adding;
    expect(thumbs(c)).toBe(0);
    c.switchTo(1);
    expect(thumbs(c)).toBe(1);
  });

  it('drafts are kept by key and forgotten with their chat', () => {
    const drafts = new Drafts();
    drafts.get(1).text = 'x';
    expect(drafts.get(1).text).toBe('x');
    drafts.forget(1);
    expect(drafts.get(1).text).toBe('');
    expect(fileName('/home/me/Pictures/cut.png')).toBe('cut.png');
    expect(fileName('C:\\Users\\me\\a b.jpg')).toBe('a b.jpg');
  });
});

describe('an image that cannot be read', () => {
  it('is named and marked as it is attached, and the message goes without it', async () => {
    mockAttach();
    const { c, sent } = composer();
    c.switchTo(1);
    await c.addPaths(['/p/a.png', '/p/cut.png', '/p/b.png', '/p/notes.txt']);
    expect(thumbs(c)).toBe(2);
    const bad = [...c.el.querySelectorAll<HTMLElement>('[data-testid=composer-thumb-bad]')];
    expect(bad.map((b) => b.textContent)).toEqual(['!cut.png×', '!notes.txt×']);
    expect(bad[0].title).toBe('cut.png: this PNG image cannot be read: the file is cut short');
    const line = c.el.querySelector<HTMLElement>('[data-testid=composer-rejected]')!;
    expect(line.hidden).toBe(false);
    expect(line.textContent).toContain('cut.png is not attached: this PNG image cannot be read');
    expect(line.textContent).toContain('notes.txt is not attached: not a supported image');
    c.input.value = 'What are these?';
    send(c);
    // the two good pictures go; the bad files are not sent and leave with the message
    await vi.waitFor(() => expect(sent).toEqual([{ text: 'What are these?', attachments: [sha('a'), sha('b')] }]));
    expect(thumbs(c, 'composer-thumb-bad')).toBe(0);
    expect(line.hidden).toBe(true);
  });

  it('only bad files: nothing is sent; a bad file can be removed', async () => {
    mockAttach();
    const { c, sent } = composer();
    await c.addPaths(['/p/cut.png']);
    send(c);
    await Promise.resolve();
    expect(sent).toEqual([]);
    c.el.querySelector<HTMLButtonElement>('[data-testid=composer-thumb-bad] [data-testid=remove-thumb]')!.click();
    expect(thumbs(c, 'composer-thumb-bad')).toBe(0);
    expect(c.el.querySelector<HTMLElement>('[data-testid=composer-thumbs]')!.hidden).toBe(true);
  });
});

describe('the offer of a model that sees images', () => {
  it('follows the model, the images and the models on disk, whichever answer comes last', async () => {
    mockAttach();
    let onDisk: { id: string; name: string }[] = [];
    let answer: (() => void) | null = null;
    const { c } = composer({ visionModels: () => new Promise((r) => { answer = () => r(onDisk); }) });
    const offer = c.el.querySelector<HTMLElement>('[data-testid=vision-offer]')!;
    c.setModel({ name: 'Tiny', vision: false });
    c.input.value = 'What is this?';
    await c.addPaths(['/p/a.png']);
    // the offer is being worked out (the models on disk are asked) when the image is removed:
    // the late answer must not bring back an offer for an image that is gone
    c.el.querySelector<HTMLButtonElement>('[data-testid=remove-thumb]')!.click();
    answer!();
    await vi.waitFor(() => expect(answer).not.toBeNull());
    await new Promise((r) => setTimeout(r, 0));
    expect(offer.hidden).toBe(true);
    // with an image again: no model on disk sees images, so it leads to Models…
    await c.addPaths(['/p/a.png']);
    answer!();
    await vi.waitFor(() => expect(offer.hidden).toBe(false));
    expect(offer.textContent).toMatch(/^Tiny cannot see images.*Find a model that sees images$/);
    // …until one is downloaded: the offer names it without waiting for Enter
    onDisk = [{ id: 'dir:vl', name: 'Tiny VL' }];
    const refreshed = c.refreshOffer();
    answer!();
    await refreshed;
    expect(offer.querySelector('[data-testid=switch-vision-model]')?.textContent).toBe('Switch to Tiny VL');
    // another text-only model: the offer names it
    c.setModel({ name: 'Other', vision: false });
    answer!();
    await vi.waitFor(() => expect(offer.textContent).toMatch(/^Other cannot see images/));
  });
});
