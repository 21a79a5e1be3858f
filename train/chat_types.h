// Chat turns and rendered conversations are defined by the tokenizer layer.
#pragma once
#include "io/chat_template.h"
