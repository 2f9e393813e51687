// Links in a rendered reply: every click is stopped (the app's window
// never navigates) and the href, as written, goes to the app's open_link;
// its refusal is shown. The scheme check itself is the app's (links.rs).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { interceptLinks } from './links';
import { setMarkdown } from './markdown';

afterEach(() => { document.body.innerHTML = ''; });

function reply(markdown: string) {
  const el = document.createElement('div');
  setMarkdown(el, markdown);
  document.body.append(el);
  return el;
}

function click(el: Element, init: MouseEventInit = {}, type = 'click'): MouseEvent {
  const event = new MouseEvent(type, { bubbles: true, cancelable: true, ...init });
  el.dispatchEvent(event);
  return event;
}

const settle = () => new Promise((r) => setTimeout(r, 0));

describe('links in replies', () => {
  it('open through the app, never in the window', async () => {
    const open = vi.fn(async (_href: string) => {});
    const toast = vi.fn();
    interceptLinks(document, open, toast);
    const el = reply('See [the docs](https://example.com/docs?a=1) or **[mail](mailto:me@example.com)**.');
    const [docs, mail] = el.querySelectorAll('a');
    expect(click(docs).defaultPrevented).toBe(true);
    // a click on something inside the link counts as the link
    expect(click(mail.querySelector('strong') ?? mail).defaultPrevented).toBe(true);
    expect(open.mock.calls.map((c) => c[0])).toEqual(['https://example.com/docs?a=1', 'mailto:me@example.com']);
    // the middle button opens too; another button's auxclick only stops navigation
    expect(click(docs, { button: 1 }, 'auxclick').defaultPrevented).toBe(true);
    expect(click(docs, { button: 2 }, 'auxclick').defaultPrevented).toBe(true);
    expect(open).toHaveBeenCalledTimes(3);
    await settle();
    expect(toast).not.toHaveBeenCalled();
  });

  it('pass the href as written (a relative one is not resolved against the app) and show a refusal', async () => {
    const open = vi.fn(async (href: string) => {
      if (!href.startsWith('https:')) throw { code: 'LINK_REFUSED', message: `“${href}” is not a full web address, so it was not opened.` };
    });
    const toast = vi.fn();
    interceptLinks(document, open, toast);
    const el = reply('[notes](notes.md) and [ftp](ftp://example.com/f)');
    const [relative, ftp] = el.querySelectorAll('a');
    expect(click(relative).defaultPrevented).toBe(true);
    expect(click(ftp).defaultPrevented).toBe(true);
    expect(open.mock.calls.map((c) => c[0])).toEqual(['notes.md', 'ftp://example.com/f']);
    await settle();
    expect(toast).toHaveBeenCalledWith('“notes.md” is not a full web address, so it was not opened.');
    expect(toast).toHaveBeenCalledTimes(2);
  });

  it('leave other clicks alone', () => {
    const open = vi.fn(async (_href: string) => {});
    interceptLinks(document, open, vi.fn());
    const el = reply('plain text, no link');
    expect(click(el.querySelector('p')!).defaultPrevented).toBe(false);
    expect(open).not.toHaveBeenCalled();
  });

  it('a javascript: link never reaches the page as a link (the sanitizer drops its href)', () => {
    const el = reply('[x](javascript:alert(1))');
    expect(el.querySelector('a[href^="javascript"]')).toBeNull();
  });
});
