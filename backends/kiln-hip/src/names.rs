//! How hipRTC is asked for an entry's symbol: by its name expression, and
//! by the spellings a demangler gives its template arguments.
//!
//! hipRTC finds a name expression's symbol by comparing the demangled name
//! as text, and a demangler spells an integer template argument as its
//! parameter's type has it: `64u` for `unsigned`, `5ul` for `size_t`,
//! `(short)3`, `(Mode)1` for an enum. C++ writes `convolution<5>` whatever
//! the type, so the entry is asked by the spelling its template's declared
//! parameter types give too, and (for a template kiln cannot find) with
//! every integer argument unsigned.

/// The other spellings `expression` is asked by, beside itself: the one
/// its template's declared parameter types give (when a text of `texts`
/// declares it), then every integer argument unsigned.
pub(crate) fn spellings(expression: &str, texts: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(declared) = declared_spelling(expression, texts)
        && declared != expression
    {
        found.push(declared);
    }
    if let Some(unsigned) = unsigned_spelling(expression)
        && !found.contains(&unsigned)
    {
        found.push(unsigned);
    }
    found
}

/// `expression` with each integer argument spelled as the declared type
/// of its template parameter has it, when a text declares the template.
fn declared_spelling(expression: &str, texts: &[&str]) -> Option<String> {
    let open = expression.find('<')?;
    let close = expression.rfind('>')?;
    let name = expression[..open].trim();
    let base = name.rsplit("::").next()?.trim();
    let arguments = split_top_level(&expression[open + 1..close]);
    let parameters = texts
        .iter()
        .find_map(|text| template_parameters(text, base))?;
    if parameters.len() < arguments.len() {
        return None;
    }
    let spelled: Vec<String> = arguments
        .iter()
        .zip(&parameters)
        .map(|(argument, parameter)| match parameter {
            Some(declared) if is_integer(argument) => spell(argument, declared),
            // An enumerator (`Mode::Fast`) is spelled by its value.
            Some(declared) => enumerator_value(argument, declared, texts)
                .map_or_else(|| argument.to_string(), |value| spell(&value, declared)),
            _ => argument.to_string(),
        })
        .collect();
    Some(format!("{name}<{}>", spelled.join(", ")))
}

/// The value of `argument` (`Mode::Fast`, `Fast`) as an enumerator of the
/// enumeration `declared`, when a text declares it with integer values.
fn enumerator_value(argument: &str, declared: &str, texts: &[&str]) -> Option<String> {
    let enumeration = declared.rsplit("::").next()?.trim();
    let (scope, enumerator) = match argument.rsplit_once("::") {
        Some((scope, enumerator)) => (Some(scope.trim()), enumerator.trim()),
        None => (None, argument.trim()),
    };
    if scope.is_some_and(|scope| scope.rsplit("::").next() != Some(enumeration)) {
        return None;
    }
    texts.iter().find_map(|text| {
        let mut rest = *text;
        while let Some(at) = rest.find("enum") {
            let after = &rest[at + "enum".len()..];
            rest = after;
            let open = after.find('{')?;
            let head = &after[..open];
            if head.contains(';') {
                continue;
            }
            let named = head
                .split(|character: char| !(character.is_alphanumeric() || character == '_'))
                .find(|word| !word.is_empty() && *word != "class" && *word != "struct")
                == Some(enumeration);
            if !named {
                continue;
            }
            let close = after[open..].find('}')? + open;
            let mut next = 0i128;
            for item in after[open + 1..close].split(',') {
                let (name, value) = match item.split_once('=') {
                    Some((name, value)) => (name.trim(), Some(value.trim())),
                    None => (item.trim(), None),
                };
                if name.is_empty() {
                    continue;
                }
                if let Some(value) = value {
                    next = value.parse().ok()?;
                }
                if name == enumerator {
                    return Some(next.to_string());
                }
                next += 1;
            }
            return None;
        }
        None
    })
}

/// The parameters of the `__global__` template `base` declared in `text`:
/// each a non-type parameter's type, or `None` for a type or template
/// parameter.
fn template_parameters(text: &str, base: &str) -> Option<Vec<Option<String>>> {
    let mut rest = text;
    while let Some(at) = rest.find("template") {
        let after = &rest[at + "template".len()..];
        rest = after;
        let Some(open) = after
            .find('<')
            .filter(|open| after[..*open].trim().is_empty())
        else {
            continue;
        };
        let Some(close) = matching(after, open) else {
            continue;
        };
        let declaration = &after[close + 1..];
        let head = &declaration[..declaration.find(['(', ';', '{']).unwrap_or(0)];
        let named = head
            .split(|character: char| !(character.is_alphanumeric() || character == '_'))
            .rfind(|word| !word.is_empty())
            == Some(base);
        if named && (head.contains("__global__") || head.contains("global")) {
            return Some(
                split_top_level(&after[open + 1..close])
                    .iter()
                    .map(|parameter| parameter_type(parameter))
                    .collect(),
            );
        }
    }
    None
}

/// The index of the `>` that closes the `<` at `open`.
fn matching(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (index, character) in text[open..].char_indices() {
        match character {
            '<' | '(' => depth += 1,
            '>' | ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(open + index);
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` split at its commas outside `<>` and `()`, each part trimmed.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, character) in text.char_indices() {
        match character {
            '<' | '(' => depth += 1,
            '>' | ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(text[start..index].trim());
                start = index + 1;
            }
            _ => {}
        }
    }
    let last = text[start..].trim();
    if !last.is_empty() || !parts.is_empty() {
        parts.push(last);
    }
    parts
}

/// A non-type parameter's type (`size_t` of `size_t N = 4`), or `None`.
fn parameter_type(parameter: &str) -> Option<String> {
    let declared = parameter.split('=').next()?.trim();
    let words: Vec<&str> = declared
        .split_whitespace()
        .filter(|word| *word != "const")
        .collect();
    match words.first() {
        None | Some(&"typename" | &"class" | &"template") => return None,
        _ => {}
    }
    let is_name = |word: &str| {
        word.chars()
            .all(|character| character.is_alphanumeric() || character == '_')
    };
    // The last word is the parameter's name when something is before it
    // and it is no word of a type.
    let type_words = match words.split_last() {
        Some((last, before))
            if !before.is_empty()
                && is_name(last)
                && !matches!(
                    *last,
                    "int" | "long" | "short" | "char" | "unsigned" | "signed"
                ) =>
        {
            before
        }
        _ => &words[..],
    };
    Some(type_words.join(" "))
}

fn is_integer(argument: &str) -> bool {
    let digits = argument.strip_prefix('-').unwrap_or(argument);
    !digits.is_empty() && digits.chars().all(|character| character.is_ascii_digit())
}

/// The integer `value` as a demangler spells it for a parameter of type
/// `declared`.
fn spell(value: &str, declared: &str) -> String {
    let declared = declared.strip_prefix("std::").unwrap_or(declared);
    let suffix = |suffix: &str| format!("{value}{suffix}");
    let cast = |type_name: &str| format!("({type_name}){value}");
    match declared {
        "int" | "signed" | "signed int" | "int32_t" => value.to_owned(),
        "unsigned" | "unsigned int" | "uint32_t" => suffix("u"),
        "long" | "long int" | "signed long" | "ptrdiff_t" => suffix("l"),
        "unsigned long" | "unsigned long int" | "size_t" => suffix("ul"),
        "long long" | "long long int" | "int64_t" => suffix("ll"),
        "unsigned long long" | "unsigned long long int" | "uint64_t" => suffix("ull"),
        "short" | "short int" | "int16_t" => cast("short"),
        "unsigned short" | "unsigned short int" | "uint16_t" => cast("unsigned short"),
        "char" => cast("char"),
        "signed char" | "int8_t" => cast("signed char"),
        "unsigned char" | "uint8_t" => cast("unsigned char"),
        "bool" => if value == "0" { "false" } else { "true" }.to_owned(),
        // An enumeration, or a type kiln does not know: a cast, as for an
        // enumeration.
        other => cast(other),
    }
}

/// `expression` with every decimal integer literal of its template
/// arguments spelled unsigned (`k<64, float>` as `k<64u, float>`), when it
/// has one.
fn unsigned_spelling(expression: &str) -> Option<String> {
    let start = expression.find('<')?;
    let (name, arguments) = expression.split_at(start);
    let mut spelled = String::from(name);
    let mut changed = false;
    let characters: Vec<char> = arguments.chars().collect();
    let mut index = 0;
    while index < characters.len() {
        let character = characters[index];
        let starts_literal = character.is_ascii_digit()
            && index > 0
            && matches!(characters[index - 1], '<' | ',' | ' ' | '-');
        if !starts_literal {
            spelled.push(character);
            index += 1;
            continue;
        }
        let mut end = index;
        while end < characters.len() && characters[end].is_ascii_digit() {
            end += 1;
        }
        spelled.extend(&characters[index..end]);
        let next = characters.get(end).copied().unwrap_or('>');
        if matches!(next, '>' | ',' | ' ') && characters[index - 1] != '-' {
            spelled.push('u');
            changed = true;
        }
        index = end;
    }
    changed.then_some(spelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_template_arguments_are_also_spelled_unsigned() {
        assert_eq!(unsigned_spelling("k<64>").as_deref(), Some("k<64u>"));
        assert_eq!(
            unsigned_spelling("scan<float, 256, 8>").as_deref(),
            Some("scan<float, 256u, 8u>")
        );
        assert_eq!(unsigned_spelling("k<-1>"), None);
        assert_eq!(unsigned_spelling("k<64u>"), None);
        assert_eq!(unsigned_spelling("plain"), None);
        assert_eq!(unsigned_spelling("k<float>"), None);
    }

    #[test]
    fn arguments_are_spelled_as_their_declared_parameter_types_have_them() {
        let text = "enum Mode { Slow, Fast };\ntemplate <typename T, size_t N, long L, short S,\n\
                    char C, Mode M = Fast, unsigned U, bool B>\n__global__ void conv(T* x) {}\n\
                    template <int N> __device__ void conv_helper() {}\n";
        assert_eq!(
            spellings("conv<float, 5, -2, 3, 65, 1, 7, 1>", &[text]),
            [
                "conv<float, 5ul, -2l, (short)3, (char)65, (Mode)1, 7u, true>",
                "conv<float, 5u, -2, 3u, 65u, 1u, 7u, 1u>"
            ]
        );
        let text = "enum class Mode : int { Slow = 2, Fast };\n\
                    template <Mode M> __global__ void blend(float* y) {}\n";
        assert_eq!(spellings("blend<Mode::Fast>", &[text]), ["blend<(Mode)3>"]);
        let text = "template <int N> __global__ void plain(float* x) {}\n";
        assert_eq!(spellings("plain<4>", &[text]), ["plain<4u>"]);
        assert!(
            spellings(
                "ops::k<4>",
                &["template <std::size_t N> __global__ void k() {}"]
            )
            .contains(&"ops::k<4ul>".to_owned())
        );
    }
}
