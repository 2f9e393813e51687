import { describe, expect, it } from 'vitest';
import { MarkdownBlocks, renderMarkdown, setMarkdown } from './markdown';
import { applyMathStyles } from './math';

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

describe('code highlighting (highlight.js common languages)', () => {
  const samples: Record<string, string> = {
    rust: 'fn main() { let x: u32 = 1; }',
    python: 'def f(x):\n    return "hi"',
    typescript: 'const x: number = 1;\nfunction f(): string { return "a"; }',
    json: '{"a": 1, "b": "two"}',
    yaml: 'name: app\ncount: 3',
    sql: 'SELECT id FROM chats WHERE id = 1;',
    swift: 'let x: Int = 1\nfunc f() -> String { return "a" }',
    kotlin: 'fun main() { val x: Int = 1 }',
    go: 'package main\nfunc main() { return }',
    bash: 'echo "hi" && exit 0',
    ruby: 'def f\n  puts "hi"\nend',
    csharp: 'public class A { int x = 1; }',
  };
  for (const [language, code] of Object.entries(samples)) {
    it(`highlights ${language}`, () => {
      const div = document.createElement('div');
      div.innerHTML = renderMarkdown('```' + language + '\n' + code + '\n```');
      expect(div.querySelector('.code-lang')!.textContent).toBe(language);
      // highlighted: at least one token span, and the text is unchanged
      expect(div.querySelectorAll('code [class^="hljs-"]').length).toBeGreaterThan(0);
      expect(div.querySelector('code')!.textContent).toBe(code);
    });
  }

  it('knows the usual short names', () => {
    for (const alias of ['rs', 'py', 'ts', 'js', 'sh', 'kt', 'yml', 'html']) {
      const html = renderMarkdown('```' + alias + '\nx = 1\n```');
      expect(html, alias).toContain(`>${alias}<`);
      expect(html, alias).not.toContain('>text<');
    }
  });
});

describe('math (KaTeX)', () => {
  const rendered = (source: string) => {
    const div = document.createElement('div');
    setMarkdown(div, source);
    return div;
  };
  const tex = (div: Element) => [...div.querySelectorAll('annotation[encoding="application/x-tex"]')].map((a) => a.textContent);

  it('typesets inline $…$ and \\(…\\)', () => {
    const div = rendered('Euler: $e^{i\\pi}+1=0$, and \\(a^2+b^2\\) too.');
    expect(div.querySelectorAll('.math-inline .katex').length).toBe(2);
    expect(tex(div)).toEqual(['e^{i\\pi}+1=0', 'a^2+b^2']);
    expect(div.querySelector('.katex-display')).toBeNull();
    expect(div.textContent).toContain('Euler: ');
  });

  it('typesets display $$…$$ and \\[…\\], as blocks and inside a line', () => {
    const div = rendered('$$\n\\frac{a}{b}\n$$\n\nthen \\[\\sum_{i=1}^n i\\] and $$x^2$$ inline\n\n\\[\n\\sqrt{2}\n\\]');
    expect(div.querySelectorAll('div.math-display .katex-display').length).toBe(2);
    expect(div.querySelectorAll('p span.math-display .katex-display').length).toBe(2);
    expect(tex(div)).toEqual(['\\frac{a}{b}', '\\sum_{i=1}^n i', 'x^2', '\\sqrt{2}']);
  });

  it('leaves prices and other lone dollars as text', () => {
    for (const source of ['It costs $5 and $10.', 'From $5 to $6', 'pay $5/$6 a month', 'a $ b $ c', '$x$5 apples', 'just \\$x\\$ here']) {
      const div = rendered(source);
      expect(div.querySelector('.katex'), source).toBeNull();
      expect(div.querySelector('.math-error'), source).toBeNull();
    }
    expect(rendered('It costs $5 and $10.').textContent!.trim()).toBe('It costs $5 and $10.');
  });

  it('reads no math inside code spans and code blocks', () => {
    const div = rendered('Use `$x$` or `\\(y\\)`:\n\n```\n$$z$$\n\\[w\\]\n```\n\n    $$indented$$');
    expect(div.querySelector('.katex')).toBeNull();
    expect([...div.querySelectorAll('code')].map((c) => c.textContent)).toEqual(['$x$', '\\(y\\)', '$$z$$\n\\[w\\]', '$$indented$$']);
  });

  it('shows a formula KaTeX cannot read as its source, and the rest of the message still renders', () => {
    const div = rendered('Bad: $\\frac{1}$ and **bold**\n\n$$\\notacommand{x}$$');
    const errors = [...div.querySelectorAll('.math-error')];
    expect(errors.map((e) => e.textContent)).toEqual(['$\\frac{1}$', '$$\\notacommand{x}$$']);
    expect(errors[0].getAttribute('title')).toMatch(/KaTeX parse error/);
    expect(div.querySelector('strong')!.textContent).toBe('bold');
  });

  it('keeps KaTeX output through the sanitizer: MathML, spans, SVG, and its layout styles through the CSSOM', () => {
    const html = renderMarkdown('$$\\sqrt{x^2}$$');
    // the sanitized HTML carries no style attribute (the CSP allows none)
    expect(html).not.toMatch(/\sstyle=/);
    const div = rendered('$$\\sqrt{x^2}$$');
    expect(div.querySelector('math semantics mrow msqrt')).not.toBeNull();
    expect(div.querySelector('.katex-html svg path')).not.toBeNull();
    expect(div.querySelector('[data-math-style]')).toBeNull();
    const strut = div.querySelector<HTMLElement>('.katex-html .strut')!;
    expect(strut.style.height).toMatch(/em$/);
  });

  it('sets back only styles KaTeX wrote, never one that loads something', () => {
    // model output cannot write raw HTML (it is shown as text, so no style reaches the page) …
    const div = rendered('<span class="katex"><span style="background:url(http://x/)">hi</span></span>');
    expect(div.querySelector('.katex, [style], [data-math-style]')).toBeNull();
    // … and what comes back from data-math-style is lengths and colours, nothing that fetches
    const el = document.createElement('div');
    el.innerHTML = '<span data-math-style="height:1.5em;background-image:url(http://x/);color:red"></span>';
    applyMathStyles(el);
    const span = el.querySelector<HTMLElement>('span')!;
    expect(span.style.height).toBe('1.5em');
    expect(span.style.color).toBe('red');
    expect(span.style.backgroundImage).toBe('');
    expect(span.hasAttribute('data-math-style')).toBe(false);
  });

  it('streams partial math without throwing and ends as the full render', () => {
    const answer = 'The area is $\\pi r^2$ and\n\n$$\n\\int_0^1 x\\,dx = \\frac{1}{2}\n$$\n\nDone, for $5.';
    const el = document.createElement('div');
    const blocks = new MarkdownBlocks(el);
    for (let i = 1; i <= answer.length; i++) blocks.update(answer.slice(0, i));
    const full = rendered(answer);
    expect(el.textContent).toBe(full.textContent);
    expect(tex(el)).toEqual(['\\pi r^2', '\\int_0^1 x\\,dx = \\frac{1}{2}']);
    expect(el.querySelector('.math-error')).toBeNull();
    expect(el.querySelector('[data-math-style]')).toBeNull();
  });
});
