# Several hosts on one machine (issue 14): each daemon in its own network namespace with its own
# address on one private switch (tests/netns/lib.sh). Needs root and `ip netns`: skipped (77)
# otherwise. Each test prints a timeline (seconds since its start) of the faults it makes and
# what the cluster did.
#   netns_multihost            scheduler, 3 servers, 2 workers on 6 hosts: a job SUCCEEDS
#   netns_partition_server     a server's link down mid-job: declared dead, slots move, job
#                              SUCCEEDS; healed, the replaced server refuses its old slots
#   netns_cut_peer             one worker cut from one server only (both directions), healed
#                              after 8 s, then (a second job) after 30 s: each job ends in
#                              bounded time, SUCCEEDED or FAILED naming that server
#   netns_partition_scheduler  the scheduler cut off for 6 s (heartbeat timeout 3 s): training
#                              goes on, nobody is declared dead, the job SUCCEEDS
if(TARGET ps_scheduler AND TARGET psctl)
  # Each takes 15-80 s (2 cores); the scripts bound every wait themselves, well below this.
  foreach(name multihost partition_server cut_peer partition_scheduler)
    add_test(NAME netns_${name}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns/${name}_test.sh ${CMAKE_BINARY_DIR})
    set_tests_properties(netns_${name} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                         LABELS "multiprocess;netns")
  endforeach()
endif()

# netns_codec_shaped (issue 33): 2 servers and 2 workers on 4 hosts whose links are shaped to
# 100 Mbit/s (tc); a short sync job per codec (none, fp16, topk, sign, int8, dgc, delta): the
# bytes the workers' links carried drop by each codec's factor and every run learns.
if(TARGET ps_server AND TARGET paramserver_core)
  add_test(NAME netns_codec_shaped
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns/codec_shaped_test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(netns_codec_shaped PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       LABELS "multiprocess;netns")
endif()
