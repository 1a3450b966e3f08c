// The Assistant page (chat/admin/assistant.py): the guidance's length against
// its cap, and the input tokens it adds to every model call, while it is
// typed. The server renders both on load, and every text this shows
// (translated, with {n} for the number): this only counts, as the server
// does, and fills the number in.
(() => {
  const field = document.getElementById("id_guidance");
  const figures = document.getElementById("kk-guidance-figures");
  if (!field || !figures) return;
  const texts = figures.dataset;
  const limit = parseInt(texts.limit, 10);
  const charsPerToken = parseFloat(texts.charsPerToken);
  const count = document.getElementById("kk-guidance-count");
  const cost = document.getElementById("kk-guidance-cost");
  const grouped = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, texts.thousands);
  const fill = (text, n) => text.replace("{n}", grouped(n));

  function update() {
    // As versions.clean() stores it: one character a line break, the ends
    // trimmed, counted in code points (as Python's len), not UTF-16 units.
    const chars = [...field.value.replace(/\r\n/g, "\n").trim()].length;
    const tokens = chars ? Math.ceil(chars / charsPerToken) : 0;
    count.textContent = fill(chars > limit ? texts.over : texts.count, chars);
    cost.textContent = tokens === 0 ? texts.none : fill(tokens === 1 ? texts.one : texts.many, tokens);
  }

  field.addEventListener("input", update);
  update(); // the same as the server's, unless the browser restored other text (Back)
})();
