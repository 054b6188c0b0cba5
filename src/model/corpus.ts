/**
 * A small English training text for test vocabularies (vocab-build.ts). Written for this project; varied on purpose:
 * prose, dialogue with contractions, numbers and dates, punctuation runs, code-like lines, whitespace runs and a little
 * non-ASCII (accents, CJK, emoji) so that the learned merges touch every branch of the pre-tokenizers.
 */
export const TRAINING_CORPUS = `The harbour was quiet when the first boat came in. Fishermen tied their ropes, counted the crates and
talked about the weather, the prices at the market and the new road that was supposed to reach the village next year.
Nobody believed the road would arrive on time; roads never did. Still, the children ran along the pier to watch.

"I don't think it's going to rain," said Maria, looking at the sky. "We'll see," her brother answered. "You're always
so sure of yourself." She laughed. "I've been right three times this week, haven't I?" He couldn't argue with that.

In the morning the baker opened at 6:30, and by 7:15 there were already twelve people waiting outside. A loaf of bread
cost 2.50 euros, a croissant 1.20, and the famous almond cake 18.00 for the whole thing or 3.75 per slice. On Sundays
the queue was twice as long. The baker said he sold 1,250 loaves in March 2023 and 1,480 in March 2024, an increase
of 18.4 percent. His daughter kept the books; she wrote every number twice, just in case.

The café near the station served coffee that was strong, bitter and cheap. A naïve tourist once asked for a latte
with oat milk and extra foam; the owner stared at him for a long moment before making it anyway. The menu also listed
crème brûlée, jalapeño soup and a smörgåsbord on Fridays. Someone had written "日本の紅茶" on the chalkboard, and
nobody knew who. A small sign by the till said: Thank you! 😊 Have a nice day 🌞 and come back soon ☕.

Weather report for the week:
  Monday     14°C  cloudy
  Tuesday    17°C  sunny
  Wednesday   9°C  rain, wind 40 km/h
  Thursday   11°C  showers
  Friday     20°C  clear skies

Questions people ask at the harbour office: When does the ferry leave? How much is a ticket? Can I bring my bicycle?
Is there a discount for students??? The clerk answers them all, patiently, every single day... even on holidays!!!

def count_words(text: str) -> dict[str, int]:
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts

function fibonacci(n) {
  if (n < 2) return n;
  let a = 0, b = 1;
  for (let i = 2; i <= n; i++) { [a, b] = [b, a + b]; }
  return b;
}

const config = { host: "localhost", port: 8080, retries: 3, timeoutMs: 2500 };
if (response.status !== 200 && response.status !== 204) { throw new Error(\`unexpected status \${response.status}\`); }
SELECT name, price FROM products WHERE price > 10.99 ORDER BY price DESC LIMIT 20;
git commit -m "fix: handle empty input" && git push origin main
x = [1, 2, 3, 4, 5]; y = {k: v for k, v in zip("abcde", x)}; print(y["c"] * 2)

The library opened a new reading room in the old town hall. It has 42 tables, 168 chairs and a long shelf of
dictionaries in English, French, German, Spanish and Japanese. Students come in the evening to study mathematics,
history and physics; retired teachers come in the afternoon to read newspapers and argue politely about football.
The librarian keeps a list of rules: no food, no loud phone calls, return books within 14 days, and always say hello.

When the storm finally came it was late at night. The wind pulled at the shutters and the rain hit the windows like
handfuls of gravel. In the morning the street was covered with leaves, branches and one bright red umbrella that
nobody ever claimed. The mayor said the damage was "minor", estimated at about 35,000 euros, and promised repairs
before the summer festival on the 21st of June. The festival would have music, dancing, fireworks and, of course, food.

Notes:
- buy milk, eggs, flour (2 kg) and sugar
- call the plumber before Thursday
- email: harbour.office@example.org
- website: https://example.org/ferry/timetable?season=summer&lang=en
- phone: +44 20 7946 0958

Résumé: experienced engineer, worked in Zürich and São Paulo; speaks English, Deutsch, Português and some 日本語.
Favourite quote: "Simple things should be simple, complex things should be possible."
Temperatures rose from −3 to +12 degrees. Prices: €5, £4, ¥600, $6. Ratio 3:2, score 7/10, growth ~4%.
It was the best of times; it was the worst of times. They walked, they talked, they ate, and then they went home.
`;
