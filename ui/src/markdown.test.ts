import { describe, expect, it } from 'vitest';
import { MarkdownBlocks, renderMarkdown, setMarkdown } from './markdown';

describe('renderMarkdown', () => {
  it('renders Markdown with highlighted code blocks and a copy button', () => {
    const html = renderMarkdown('Some **bold** text\n\n```rust\nfn main() {}\n```');
    expect(html).toContain('<strong>bold</strong>');
    expect(html).toContain('class="copy-code"');
    expect(html).toContain('hljs-keyword');
    expect(html).toContain('>rust<');
  });

  it('never lets model output run script or load things', () => {
    const html = renderMarkdown('<img src=x onerror="alert(1)"> <script>alert(2)</script> [x](javascript:alert(3))');
    const div = document.createElement('div');
    div.innerHTML = html;
    expect(div.querySelector('img, script')).toBeNull();
    expect(div.querySelector('[onerror]')).toBeNull();
    for (const a of div.querySelectorAll('a')) expect(a.getAttribute('href') ?? '').not.toMatch(/^javascript:/i);
  });

  it('shows an unknown language as plain escaped text', () => {
    const html = renderMarkdown('```brainfart\n<b>not bold</b>\n```');
    expect(html).toContain('&lt;b&gt;not bold&lt;/b&gt;');
  });

  it('wires the copy button to the block text', async () => {
    const written: string[] = [];
    Object.defineProperty(navigator, 'clipboard', { value: { writeText: async (t: string) => { written.push(t); } }, configurable: true });
    const el = document.createElement('div');
    setMarkdown(el, '```\nprint("hi")\n```');
    el.querySelector<HTMLButtonElement>('button.copy-code')!.click();
    await Promise.resolve();
    expect(written).toEqual(['print("hi")']);
  });
});

describe('MarkdownBlocks (a streaming reply)', () => {
  it('keeps finished blocks and re-renders only the last one as text arrives', () => {
    const el = document.createElement('div');
    const blocks = new MarkdownBlocks(el);
    const answer = '# Title\n\nFirst paragraph with **bold**.\n\n```python\nprint("hi")\n```\n\n- one\n- two\n\nLast words here.';
    let shown = '';
    let firstBlock: Element | null = null;
    for (const piece of answer.match(/[\s\S]{1,3}/g)!) {
      shown += piece;
      blocks.update(shown);
      if (!firstBlock && shown.includes('\n\n')) firstBlock = el.querySelector('h1');
    }
    // the heading rendered once stays the same element to the end
    expect(firstBlock).not.toBeNull();
    expect(el.querySelector('h1')).toBe(firstBlock);
    // the whole answer, as a full render gives it
    const full = document.createElement('div');
    full.innerHTML = renderMarkdown(answer);
    expect(el.textContent).toBe(full.textContent);
    expect(el.querySelector('pre code')!.textContent).toBe('print("hi")');
    expect(el.querySelectorAll('li').length).toBe(2);
    // blocks rendered ≈ one per update (the last block), not all blocks per update
    const updates = Math.ceil(answer.length / 3);
    expect(blocks.rendered).toBeLessThan(updates + 10);
  });

  it('rebuilds from the first block whose source changed', () => {
    const el = document.createElement('div');
    const blocks = new MarkdownBlocks(el);
    blocks.update('Intro\n\nA line');
    const intro = el.querySelector('p');
    // "A line" followed by "===" turns into a heading: the block is redone, the intro kept
    blocks.update('Intro\n\nA line\n===');
    expect(el.querySelector('p')).toBe(intro);
    expect(el.querySelector('h1')!.textContent).toBe('A line');
    // and model output stays sanitized block by block
    blocks.update('Intro\n\n<img src=x onerror="alert(1)">');
    expect(el.querySelector('img, [onerror]')).toBeNull();
  });
});
