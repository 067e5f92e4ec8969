// DOM helpers the views share: no innerHTML anywhere (every value the API
// returns is text), elements built with el().

export const $ = (id) => document.getElementById(id);

export const el = (tag, props, ...kids) => {
  const e = document.createElement(tag);
  if (props) for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v; else if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
