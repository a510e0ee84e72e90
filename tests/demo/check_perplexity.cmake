# Runs `ft perplexity` on TEXT and fails unless its JSON says perplexity < MAX_PPL (cmake -P).
execute_process(COMMAND ${FT} perplexity --model ${MODEL} --file ${TEXT} --threads 2
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ft perplexity failed (${rc}): ${err}")
endif()
string(JSON ppl GET "${out}" perplexity)
string(JSON tokens GET "${out}" tokens)
message(STATUS "${out}")
if(tokens LESS 4000 OR NOT ppl LESS ${MAX_PPL})
  message(FATAL_ERROR "perplexity ${ppl} over ${tokens} tokens; expected < ${MAX_PPL} over >= 4000")
endif()
